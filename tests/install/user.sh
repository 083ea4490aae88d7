#!/usr/bin/env bash
# A user's install, as an ordinary user with no rights outside $HOME: the
# README's build line into a prefix in $HOME. Every installed file lies inside
# the prefix (the libfabric provider too, found with FI_PROVIDER_PATH as the
# install says), a program built with pkg-config runs, ulnet.pc's -L and rpath
# name the same library even from a moved copy, and `ninja uninstall` leaves
# the prefix empty.
# Runs as root (tests/run.sh): makes a user of its own for the run and removes
# it, its home and everything in it afterwards. Exit 77: not root.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$(pwd)
[[ $(id -u) == 0 ]] || { echo "not root: cannot make an unprivileged user (skipped)"; exit 77; }
command -v useradd >/dev/null || { echo "no useradd: skipped"; exit 77; }

user=ulnet-inst-$$
home=$(mktemp -d /var/tmp/ulnet-user.XXXXXX) # not /tmp: some cases mount their own
cleanup() {
    userdel "$user" 2>/dev/null || true
    [[ -n ${KEEP:-} ]] || rm -rf "$home"
}
trap cleanup EXIT
useradd --no-create-home --home-dir "$home" --shell /bin/bash "$user"
chown "$user:" "$home"
chmod 700 "$home"
mkdir "$home/src"
tar -C "$src" --exclude=./.git --exclude='./build*' -cf - . | tar -C "$home/src" -xf -
chown -R "$user:" "$home/src"

# Everything below runs as that user, with a login-like environment.
as_user() { runuser -u "$user" -- env -i HOME="$home" PATH=/usr/bin:/bin:/usr/sbin:/sbin "$@"; }
# shellcheck disable=SC2016 # expanded by the user's shell
as_user bash -euo pipefail -c '
cd "$HOME/src"
prefix=$HOME/opt/ulnet
cmake -S . -B build -G Ninja -DBUILD_TESTING=OFF -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
ninja -C build >/dev/null
ninja -C build install >install.log 2>&1 || { cat install.log; echo "ninja install as a user failed"; exit 1; }
# Every file inside the prefix
outside=$(grep -v "^$prefix/" build/install_manifest.txt || true)
[[ -z $outside ]] || { echo "installed outside the prefix: $outside"; exit 1; }
# The provider: where the install says, found by libfabric there
if [[ -f build/prov/libulnet-fi.so ]]; then
    provdir=$prefix/lib/libfabric
    [[ -f $provdir/libulnet-fi.so ]] || { echo "no provider in $provdir"; exit 1; }
    grep -q "FI_PROVIDER_PATH=$provdir\$" install.log ||
        { echo "the install does not say FI_PROVIDER_PATH=$provdir:"; cat install.log; exit 1; }
    if command -v fi_info >/dev/null; then
        out=$(FI_PROVIDER_PATH=$provdir fi_info -p ulnet 2>&1) || true
        grep -q "provider: ulnet" <<<"$out" || { echo "fi_info -p ulnet: $out"; exit 1; }
    fi
fi
# The lines of the README, as a user types them
export PATH=$prefix/bin:$PATH PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc examples/hello.c $(pkg-config --cflags --libs ulnet) -o hello
ulnrun -n 2 --timeout 30 ./hello >hello.out
[[ $(grep -c "got \"hello from rank" hello.out) == 2 ]] || { cat hello.out; exit 1; }
# ulnet.pc claims no relocation: a moved copy still links against, and runs
# with, the library it names (-L and the rpath are the same directory)
cp -a "$prefix" "$HOME/moved"
for pc in "$prefix" "$HOME/moved"; do
    libs=$(PKG_CONFIG_PATH=$pc/lib/pkgconfig pkg-config --libs ulnet)
    L=$(sed -n "s/.*-L\([^ ]*\).*/\1/p" <<<"$libs")
    R=$(sed -n "s/.*-rpath,\([^ ]*\).*/\1/p" <<<"$libs")
    [[ -n $L && $(realpath "$L") == $(realpath "$R") ]] ||
        { echo "ulnet.pc in $pc: -L $L but rpath $R"; exit 1; }
done
rm -rf "$HOME/moved"
# uninstall: nothing left in the prefix
ninja -C build uninstall >/dev/null
left=$(find "$prefix" -mindepth 1)
[[ -z $left ]] || { echo "left after uninstall: $left"; exit 1; }
echo "user install: $(wc -l <build/install_manifest.txt) files inside $prefix, provider with FI_PROVIDER_PATH, uninstalled"
'
