#!/usr/bin/env bash
# The one list of Debian packages outboxd needs. Installs only what is missing; works as root or
# through sudo. Usage: scripts/install-deps.sh [--build|--runtime]
#   (default)  everything to build, test and run locally: compiler, libraries, PostgreSQL server
#   --build    compiler and libraries only (the container's build stage)
#   --runtime  only the shared libraries and tools the container's runtime stage needs
set -euo pipefail

build_packages=(
  g++ cmake ninja-build pkg-config make
  libcaf-dev libpqxx-dev libcpp-httplib-dev rapidjson-dev libfmt-dev doctest-dev
)
database_packages=(postgresql-15 postgresql-client-15 curl ca-certificates)
runtime_packages=(
  libcaf-core0.17 libcaf-io0.17 libpqxx-6.4 libcpp-httplib0.11 libfmt9 curl ca-certificates
)

case "${1:-}" in
  "") packages=("${build_packages[@]}" "${database_packages[@]}") ;;
  --build) packages=("${build_packages[@]}") ;;
  --runtime) packages=("${runtime_packages[@]}") ;;
  *) echo "usage: install-deps.sh [--build|--runtime]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
