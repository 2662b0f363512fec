#!/usr/bin/env bash
# Makes this machine's podman ready for the container tests (test/container/), idempotently:
#   1. an engine configuration that works where systemd, cgroup v2 only and raising rlimits
#      cannot be assumed (written only when /etc/containers/containers.conf is absent or ours);
#   2. the Debian base images the Dockerfiles start from, when they are not there already:
#      pulled from a registry if one answers, else bootstrapped with mmdebstrap from the host's
#      own apt sources and tagged as debian:bookworm, debian:bookworm-slim.
# Prints why and exits 1 when podman cannot run a container at all. Needs root.
# scripts/install-deps.sh installs the packages (podman, runc, mmdebstrap, podman-compose).
set -euo pipefail

say() { echo "container-engine: $*" >&2; }
fail() { say "$*"; exit 1; }

command -v podman >/dev/null || fail "podman is not installed (scripts/install-deps.sh installs it)"
[[ $(id -u) -eq 0 ]] || fail "the container tests use rootful podman: run them as root"

marker="# written by outboxd scripts/container-engine.sh"
conf=/etc/containers/containers.conf
if [[ ! -e $conf ]] || head -1 "$conf" | grep -qxF "$marker"; then
  # netavark (with aardvark-dns: containers find each other by name), not the CNI plugins.
  # runc rather than crun: crun refuses hybrid cgroup v1/v2 hosts. Limits no higher than the
  # hard ones: root without CAP_SYS_RESOURCE cannot raise them, and podman's defaults do.
  nofile=$(ulimit -Hn); [[ $nofile == unlimited ]] && nofile=1048576
  nproc=$(ulimit -Hu); { [[ $nproc == unlimited ]] || ((nproc > 32768)); } && nproc=32768
  want="$marker
[containers]
default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]
[network]
network_backend = \"netavark\"
[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\""
  if [[ ! -e $conf || "$(cat "$conf")" != "$want" ]]; then
    mkdir -p /etc/containers
    printf '%s\n' "$want" >"$conf"
    say "wrote $conf"
  fi
fi

info=$(podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.NetworkBackend}}' 2>&1) ||
  fail "podman cannot run here: $info"

base_images() {
  podman image exists docker.io/library/debian:bookworm &&
    podman image exists docker.io/library/debian:bookworm-slim
}

if ! base_images; then
  if timeout 60 podman pull -q docker.io/library/debian:bookworm >/dev/null 2>&1 &&
    timeout 60 podman pull -q docker.io/library/debian:bookworm-slim >/dev/null 2>&1; then
    say "pulled debian:bookworm and debian:bookworm-slim"
  else
    command -v mmdebstrap >/dev/null || fail "no registry answers and mmdebstrap is missing"
    say "no registry answers: bootstrapping debian:bookworm from this host's apt sources"
    # The host's bookworm sources (mirror and components), as one-line deb entries.
    mapfile -t sources < <(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' \
      'Created-By: Packages' 2>/dev/null | awk '$2 ~ /^bookworm/ { print "deb " $1 " " $2 " " $3 }' |
      sort -u)
    ((${#sources[@]})) || fail "the host's apt has no bookworm indexes: run apt-get update"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    options=(--variant=minbase --include=ca-certificates --aptopt='Acquire::Languages "none"')
    # merged /usr without the usrmerge package (and its perl), as the official images are
    hooks=/usr/share/mmdebstrap/hooks/maybe-merged-usr
    [[ -d $hooks ]] && options+=(--hook-dir="$hooks")
    # A host whose HTTPS egress is signed by a local CA: the image trusts it too.
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
      options+=(--customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/"
        chroot "$1" update-ca-certificates >/dev/null 2>&1 || true')
    fi
    options+=(--customize-hook='rm -f "$1/etc/hostname"; : > "$1/etc/resolv.conf"')
    # Slim, as the registry's -slim images are: no manuals, documentation or translations, in the
    # image or in what is installed in it later (the copyright files stay).
    for path in /usr/share/man /usr/share/doc /usr/share/info /usr/share/locale; do
      options+=(--dpkgopt="path-exclude=$path/*")
    done
    options+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
    options+=(--customize-hook='rm -rf "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/locale/*
      find "$1/usr/share/doc" -type f ! -name copyright -delete; rm -rf "$1"/var/cache/apt/*.bin')
    printf '%s\n' "${sources[@]}" >"$work/sources.list"
    mmdebstrap "${options[@]}" bookworm "$work/rootfs.tar" "$work/sources.list" \
      >"$work/mmdebstrap.log" 2>&1 || { tail -20 "$work/mmdebstrap.log" >&2; fail "mmdebstrap failed"; }
    podman import -q --change 'CMD ["bash"]' "$work/rootfs.tar" localhost/debian:bookworm >/dev/null
    for tag in docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim; do
      podman tag localhost/debian:bookworm "$tag"
    done
    say "made debian:bookworm and debian:bookworm-slim ($(podman image inspect --format '{{.Size}}' localhost/debian:bookworm | numfmt --to=iec) each)"
  fi
fi

out=$(podman run --rm docker.io/library/debian:bookworm-slim true 2>&1) ||
  fail "podman cannot run a container here: $out"
