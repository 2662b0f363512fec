#!/usr/bin/env bash
# The one list of Debian packages outboxd needs. Installs only what is missing; works as root or
# through sudo. Usage: scripts/install-deps.sh [--build|--runtime]
#   (default)  everything to build, test and run locally: compiler, libraries, PostgreSQL server,
#              Chromium and Node.js for the browser test, wrk and python3 for bench/, Graphviz for
#              the diagrams of docs/ (scripts/docs.sh), podman for the container tests
#   --build    compiler and libraries only (the container's build stage)
#   --runtime  only the shared libraries and tools the container's runtime stage needs
set -euo pipefail

build_packages=(
  g++ cmake ninja-build pkg-config make
  libcaf-dev libpqxx-dev libcpp-httplib-dev rapidjson-dev libfmt-dev doctest-dev
  libpq-dev            # conf/ checks database.url with libpq's own parser
  libcurl4-openssl-dev # the outgoing client (client/)
  openssl              # test/client makes its test CA and certificates with it
)
database_packages=(postgresql-15 postgresql-client-15 curl ca-certificates)
browser_test_packages=(chromium nodejs npm) # test/browser drives Debian's chromium with playwright-core
bench_packages=(wrk python3)                 # bench/run.sh: the intake load and the report
docs_packages=(graphviz)                     # scripts/docs.sh renders docs/diagrams/*.dot
# test/container builds the image and runs it, alone and in compose, on rootful podman
# (scripts/container-engine.sh configures it); mmdebstrap makes the Debian base image where no
# registry answers.
container_packages=(
  podman runc conmon fuse-overlayfs slirp4netns uidmap iptables netavark aardvark-dns catatonit
  podman-compose mmdebstrap
)
runtime_packages=(
  libcaf-core0.17 libcaf-io0.17 libpqxx-6.4 libcpp-httplib0.11 libfmt9 libcurl4 libssl3
  curl ca-certificates # curl: the image's HEALTHCHECK
)

case "${1:-}" in
  "") packages=("${build_packages[@]}" "${database_packages[@]}" "${browser_test_packages[@]}"
          "${bench_packages[@]}" "${docs_packages[@]}" "${container_packages[@]}") ;;
  --build) packages=("${build_packages[@]}") ;;
  --runtime) packages=("${runtime_packages[@]}") ;;
  *) echo "usage: install-deps.sh [--build|--runtime]" >&2; exit 2 ;;
esac

# NodeSource's nodejs carries npm and conflicts with Debian's: a working command counts as installed.
declare -A command_of=([nodejs]=node [npm]=npm)
missing=()
for p in "${packages[@]}"; do
  if [[ -n "${command_of[$p]:-}" ]] && command -v "${command_of[$p]}" >/dev/null; then
    continue
  fi
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
