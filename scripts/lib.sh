# Shared helpers for the scripts in this folder. Source it; do not run it.

# step NAME: prints a banner so a CI log reads as a list of steps.
step() { printf '\n=== %s ===\n' "$*"; }

die() { printf 'cosid scripts: %s\n' "$*" >&2; exit 1; }

# need_apt CMD PACKAGE: makes sure CMD exists, installing Debian's PACKAGE when running as root.
need_apt() {
  local cmd=$1 pkg=$2
  command -v "$cmd" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing $pkg (for $cmd) from Debian's packages"
    if [ -z "${COSID_APT_UPDATED:-}" ]; then
      apt-get update -qq >/dev/null || die "apt-get update failed; cannot install $pkg"
      export COSID_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "$pkg" >/dev/null \
      || die "apt-get install $pkg failed; install it by hand (it provides $cmd)"
  fi
  command -v "$cmd" >/dev/null 2>&1 \
    || die "$cmd is missing; install Debian's package $pkg (as root: apt-get install $pkg)"
}

# pg_bin_dir: the folder with initdb and pg_ctl, installing PostgreSQL if needed (root only).
pg_bin_dir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$d" ]; then
    need_apt /usr/lib/postgresql/15/bin/initdb postgresql >/dev/null 2>&1 || true
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  fi
  [ -n "$d" ] || die "PostgreSQL server binaries are missing; install Debian's package postgresql"
  echo "$d"
}
