#!/usr/bin/env bash
# scripts/dist.sh: the release build behind `make dist`.
#
#   scripts/dist.sh [-o DIR] [ARCH...]
#
# Builds jobwatch for linux/amd64 and linux/arm64 (or the ARCHs named),
# with cgo, since SQLite is mattn/go-sqlite3: a target other than this
# machine's architecture is built with Debian's cross compiler
# (gcc-aarch64-linux-gnu for arm64, gcc-x86-64-linux-gnu for amd64), or
# with CC_<ARCH> (CC_arm64=...) when set. The binaries link glibc
# dynamically: built on Debian 12, they need glibc 2.34 or later.
#
# Each binary has its version, commit and build date stamped (-ldflags
# -X), so `jobwatch --version` prints them:
#   VERSION  default `git describe --tags --always --dirty`
#   COMMIT   default `git rev-parse HEAD`
#   build date: SOURCE_DATE_EPOCH (seconds) if set, else now; in UTC
# It writes to DIR (default dist/) jobwatch_<version>_linux_<arch>.tar.gz,
# each a directory of that name holding jobwatch, README.md, LICENSE and
# jobwatch.service (packaging/'s systemd unit),
# and SHA256SUMS for the tarballs of this run, for `sha256sum -c`. Older
# tarballs there are removed first; nothing else in DIR is touched. DIR
# gets a .gitignore of "*", so what a build leaves there is never
# committed.
#
# Reproducible-ish: -trimpath, no build ids that depend on the machine, and
# tarballs with sorted names, owner 0, the build date as every file's time
# and gzip without a name or time: the same commit, toolchain and
# SOURCE_DATE_EPOCH give the same bytes.
set -euo pipefail

usage() { echo "usage: scripts/dist.sh [-o DIR] [amd64|arm64]..." >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/dist"
while getopts "o:h" opt; do
	case "$opt" in
	o) out=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(amd64 arm64)

cd "$root"

# The Debian triple of each architecture a release is built for.
triple() {
	case "$1" in
	amd64) echo x86_64-linux-gnu ;;
	arm64) echo aarch64-linux-gnu ;;
	*) echo "scripts/dist.sh: unknown architecture $1: amd64 or arm64" >&2; exit 2 ;;
	esac
}
# The Debian package of the cross compiler for an architecture.
crosspkg() {
	case "$1" in
	amd64) echo gcc-x86-64-linux-gnu ;;
	arm64) echo gcc-aarch64-linux-gnu ;;
	esac
}

host=$(go env GOHOSTARCH)
# The C compiler for each architecture, checked before anything is built,
# so a missing one is said at once.
declare -A cc
for arch in "${arches[@]}"; do
	t=$(triple "$arch")
	var="CC_$arch"
	if [ -n "${!var:-}" ]; then
		cc[$arch]=${!var}
	elif [ "$arch" = "$host" ]; then
		cc[$arch]=${CC:-gcc}
	else
		cc[$arch]=$t-gcc
	fi
	command -v "${cc[$arch]%% *}" >/dev/null 2>&1 || {
		echo "scripts/dist.sh: no C compiler for linux/$arch (${cc[$arch]}): on Debian, apt-get install $(crosspkg "$arch")" >&2
		exit 1
	}
done

if [ -z "${VERSION:-}" ]; then
	VERSION=$(git describe --tags --always --dirty 2>/dev/null) || {
		echo "scripts/dist.sh: git describe failed: run it in a git checkout, or set VERSION (and COMMIT)" >&2
		exit 1
	}
fi
if [ -z "${COMMIT:-}" ]; then
	COMMIT=$(git rev-parse HEAD 2>/dev/null) || COMMIT=unknown
fi
case "$VERSION" in
*/* | *" "* | "") echo "scripts/dist.sh: VERSION \"$VERSION\" cannot name a file" >&2; exit 2 ;;
esac
epoch=${SOURCE_DATE_EPOCH:-$(date +%s)}
date=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

mkdir -p "$out"
out=$(cd "$out" && pwd)
printf '*\n' >"$out/.gitignore"
rm -f "$out"/jobwatch_*_linux_*.tar.gz "$out/SHA256SUMS"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

ldflags="-s -w -buildid= -X main.buildVersion=$VERSION -X main.buildCommit=$COMMIT -X main.buildDate=$date"
tarballs=()
for arch in "${arches[@]}"; do
	name="jobwatch_${VERSION}_linux_${arch}"
	mkdir -p "$stage/$name"
	echo "dist: building $name (CC=${cc[$arch]})"
	CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=${cc[$arch]} \
		go build -trimpath -ldflags "$ldflags" -o "$stage/$name/jobwatch" ./cmd/jobwatch
	cp README.md LICENSE packaging/jobwatch.service "$stage/$name/"
	chmod 0755 "$stage/$name/jobwatch"
	chmod 0644 "$stage/$name/README.md" "$stage/$name/LICENSE" "$stage/$name/jobwatch.service"
	tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
		-cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
	tarballs+=("$name.tar.gz")
done
(cd "$out" && sha256sum "${tarballs[@]}" >SHA256SUMS)
echo "dist: wrote to $out:"
(cd "$out" && ls -l "${tarballs[@]}" SHA256SUMS)
