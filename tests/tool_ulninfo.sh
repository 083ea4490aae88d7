#!/usr/bin/env bash
# ulninfo itself: alone it is a job of one and prints every section; settings
# given in the environment show as set, with their defaults beside them; under
# ulnrun only rank 0 prints and the bootstrap and peers are the job's; a bad
# setting or a bad option fails plainly (under ulnrun, said once per job).
# The settings it lists (the library's own table) are exactly the ones
# docs/running.md documents, with the same defaults, and every one in the
# README's table is among them: the docs cannot drift from the code, and every
# setting is in the README's table. ulninfo --version is the project's version.
#   tool_ulninfo.sh ULNRUN ULNINFO SOURCE_DIR PMIX(0|1)
set -euo pipefail
ulnrun=$1 ulninfo=$2 src=$3 pmix=$4
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

out=$("$ulninfo")
for s in "# Build" "# Bootstrap" "# Transports" "# Limits" "# Settings"; do
    grep -qF -- "$s" <<<"$out" || fail "no '$s' section"
done
grep -q '^in use: *single$' <<<"$out" || fail "alone, the bootstrap is not 'single'"
if [[ $pmix == 1 ]]; then want="built in"; else want="absent"; fi
grep -q "^PMIx bootstrap: $want" <<<"$out" || fail "PMIx should be reported '$want'"
grep -q '^nap_max *8192 ' <<<"$out" || fail "default nap_max not shown"

out=$(ULN_RING_BYTES=65536 ULN_NAP_MAX=4096 "$ulninfo")
grep -q '^ULN_RING_BYTES=65536 .*(set) default 131072' <<<"$out" || fail "a set value is not marked"
grep -q 'NAP ring per (peer, endpoint) *65536 B' <<<"$out" || fail "the limit in force is not shown"
grep -q '^nap_max *4096 ' <<<"$out" || fail "nap_max in force not shown"

out=$(ULN_TRANSPORT=udp "$ulnrun" -n 3 --timeout 60 "$ulninfo")
[[ $(grep -c '^# ulnet ' <<<"$out") == 1 ]] || fail "under ulnrun, not exactly one rank printed"
grep -q '^in use: *ulnrun$' <<<"$out" || fail "under ulnrun, the bootstrap is not 'ulnrun'"
grep -q '^ranks: *3 ' <<<"$out" || fail "the job's size is not shown"
grep -q '^peers: *2 over udp, 0 over shm (transport udp)' <<<"$out" || fail "udp peers not shown"
grep -q 'sealed datagrams (ULN_SECURE) *off' <<<"$out" || fail "ULN_SECURE's default not shown"
out=$(ULN_TRANSPORT=udp ULN_SECURE=encrypt ULN_SECURE_CIPHER=chacha20-poly1305 "$ulnrun" -n 2 \
    --timeout 60 "$ulninfo")
grep -q 'sealed datagrams (ULN_SECURE) *encrypt' <<<"$out" || fail "ULN_SECURE=encrypt not shown"
grep -q 'cipher *chacha20-poly1305 (ULN_SECURE_CIPHER)' <<<"$out" || fail "the cipher not shown"
grep -q 'CPU accelerates AES-GCM *\(yes\|no\)' <<<"$out" || fail "the CPU's AES not shown"
grep -q 'sealed by *OpenSSL libcrypto' <<<"$out" || fail "the sealing libraries not shown"

rc=0
ULN_RING_BYTES=5 "$ulninfo" >/dev/null 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "a bad setting gave status $rc, want 1"
# -c opens nothing, but says what uln_open would: the resolved values, or
# the refusal with the library's reason.
out=$(ULN_NAP_MAX=4k "$ulninfo" -c)
grep -q '^# uln_open takes these settings: nap_max 4096, sq_depth 256' <<<"$out" ||
    fail "-c does not say what uln_open takes"
rc=0
err=$(ULN_RING_BYTES=5000 "$ulninfo" -c 2>&1 >/dev/null) || rc=$?
[[ $rc == 1 ]] || fail "-c with a bad setting gave status $rc, want 1"
grep -q 'ULN_RING_BYTES' <<<"$err" || fail "-c does not name the refused setting: $err"
grep -q 'uln_open would refuse' <<<"$err" || fail "-c does not say uln_open would refuse"
rc=0
"$ulninfo" --bogus >/dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a bad option gave status $rc, want 2"
# Under a launcher every rank has the bad option: it is said once per job,
# by rank 0, and every rank still fails with it. Ranks other than 0 silent,
# each on its own (ulnrun ends a job at its first failure, so the job alone
# could hide a rank that printed); then whole jobs. --help, --version once.
for r in 0 1 2; do
    rc=0
    err=$(ULN_RANK=$r "$ulninfo" --bad-option 2>&1 >/dev/null) || rc=$?
    [[ $rc == 2 ]] || fail "rank $r: a bad option gave status $rc, want 2"
    if [[ $r == 0 ]]; then
        grep -q '^Usage: ulninfo' <<<"$err" || fail "rank 0 did not report the bad option"
    else
        [[ -z $err ]] || fail "rank $r reported the bad option too: $err"
    fi
done
[[ -z $(PMIX_RANK=1 "$ulninfo" --help) ]] || fail "PMIx rank 1 printed --help"
rc=0
err=$("$ulnrun" -n 3 --timeout 60 "$ulninfo" --bad-option 2>&1 >/dev/null) || rc=$?
[[ $rc == 2 ]] || fail "ulnrun -n 3 ulninfo --bad-option gave status $rc, want 2"
[[ $(grep -c "unrecognized option '--bad-option'" <<<"$err") == 1 ]] ||
    fail "ulnrun -n 3: the bad option not reported exactly once: $err"
[[ $(grep -c '^Usage: ulninfo' <<<"$err") == 1 ]] ||
    fail "ulnrun -n 3: the usage not printed exactly once: $err"
out=$("$ulnrun" -n 3 --timeout 60 "$ulninfo" --help)
[[ $(grep -c '^Usage: ulninfo' <<<"$out") == 1 ]] || fail "ulnrun -n 3: --help not once"
out=$("$ulnrun" -n 3 --timeout 60 "$ulninfo" --version)
[[ $(grep -c '^ulninfo (ulnet) ' <<<"$out") == 1 ]] || fail "ulnrun -n 3: --version not once"

# The settings: the library's table against the docs.
"$ulninfo" -c | sed -n 's/^\(ULN_[A-Z_]*\)=\([^ ]*\) .*/\1 \2/p' | sort >"${TMPDIR:-/tmp}/ulninfo.$$"
trap 'rm -f "${TMPDIR:-/tmp}/ulninfo.$$"' EXIT
table=$(<"${TMPDIR:-/tmp}/ulninfo.$$")
[[ $(wc -l <<<"$table") -ge 20 ]] || fail "ulninfo -c lists too few settings"
# docs/running.md: rows "| `ULN_X` | default | meaning |" (default "—" for none)
docs=$(sed -n '/^## Settings/,/^## /p' "$src/docs/running.md" |
    sed -n 's/^| `\(ULN_[A-Z_]*\)` | \([^|]*\) |.*/\1 \2/p' |
    sed 's/ *$//; s/ —$/ /' | sort)
diff <(echo "$table") <(echo "$docs") >&2 ||
    fail "docs/running.md's settings table differs from the library's (< library, > docs)"
readme=$(sed -n 's/^| `\(ULN_[A-Z_]*\)` |.*/\1/p' "$src/README.md")
for v in $readme; do
    grep -q "^$v " <<<"$table" || fail "README documents $v, which the library does not read"
done
# ...and the other way: every setting is in the README's table, but those a
# launcher sets, which its "Set by the launcher" paragraph names.
launcher=$(sed -n '/^Set by the launcher/,/^$/p' "$src/README.md")
for v in $(cut -d' ' -f1 <<<"$table"); do
    case $v in
    ULN_RANK | ULN_SIZE | ULN_JOB_KEY | ULN_BOOT_FD | ULN_ROOT)
        grep -q "\`$v" <<<"$launcher" || fail "README's launcher paragraph does not name $v" ;;
    *) grep -qx "$v" <<<"$readme" || fail "README's settings table lacks $v" ;;
    esac
done

# One version everywhere: project(VERSION) in CMakeLists.txt is the library's
# (uln_version, through ulninfo); the build checks ulnet.h's macros against it.
want=$(sed -n 's/^project(ulnet VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[[ -n $want ]] || fail "no project(ulnet VERSION ...) in CMakeLists.txt"
[[ $("$ulninfo" --version) == "ulninfo (ulnet) $want" ]] ||
    fail "ulninfo --version says '$("$ulninfo" --version)', the project is $want"
# The build report (ulninfo -b, as ucx_info -b): what is built in, where the
# provider installs, without opening a context.
build=$("$ulninfo" -b)
for l in "PMIx bootstrap:" "AF_XDP link:" "libfabric provider:" "build type:" "install prefix:"; do
    grep -q "^$l" <<<"$build" || fail "ulninfo -b lacks '$l': $build"
done
if [[ $pmix == 1 ]]; then want_pmix="built in"; else want_pmix="absent"; fi
grep -q "^PMIx bootstrap: $want_pmix" <<<"$build" || fail "ulninfo -b: PMIx is not $want_pmix: $build"
grep -q "^libfabric provider: \(absent\|built .*installs into .*/libfabric\)" <<<"$build" ||
    fail "ulninfo -b does not say where the provider installs: $build"
[[ $("$ulnrun" --version) == "ulnrun (ulnet) $want" ]] ||
    fail "ulnrun --version says '$("$ulnrun" --version)', the project is $want"
[[ $("$ulninfo" | sed -n 1p) == "# ulnet $want" ]] ||
    fail "ulninfo's heading does not say $want"
echo "ulninfo: all checks passed"
