#!/usr/bin/env bash
# test_ulnrun.sh - black-box tests of ulnrun; one ctest case per CASE.
#
#   test_ulnrun.sh CASE ULNRUN HELPER [OPEN_CHECK]
#
# CASE: env all_ok exit_code sigkill abort grace timeout signals kill9
#       kill9_early keep_going usage uln_open settings (or "all")
#
# Every case also checks that ulnrun left nothing in /dev/shm and no socket
# file under /tmp. Waits poll for a condition under a deadline rather than
# sleeping a fixed time, so a loaded 2-core machine slows the tests down but
# does not make them fail.
set -u
export LC_ALL=C # EPOCHREALTIME must use '.' as the decimal point

if [ $# -lt 3 ]; then
    echo "usage: $0 CASE ULNRUN HELPER [OPEN_CHECK]" >&2
    exit 2
fi
CASE=$1 ULNRUN=$2 HELPER=$3 OPEN_CHECK=${4:-}
HELPER_COMM=$(basename "$HELPER" | cut -c1-15) # /proc/PID/comm is truncated to 15

failed=0
sub=""
fail() {
    echo "FAIL [$CASE${sub:+/$sub}]: $*"
    failed=1
}
note() { echo "     [$CASE${sub:+/$sub}] $*"; }
begin() {
    sub=$1
    echo "---- $CASE/$sub"
}

# Scratch space under the build tree, not /tmp: /tmp is what the leak check
# watches. Everything here is removed on exit.
WORK=$(mktemp -d "$PWD/ulnrun-test.XXXXXX") || exit 1
BG_PIDS=()
cleanup() {
    # On a failed assertion, do not leave sleeping ranks behind. Only pids this
    # script started or that its ranks reported are touched.
    local p
    for p in "${BG_PIDS[@]}"; do
        # Only if it is still our unreaped child: a reaped pid may be reused.
        if [ "$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)" = $$ ]; then
            kill -KILL "$p" 2>/dev/null
        fi
    done
    for f in "$WORK"/*/pid.*; do
        [ -f "$f" ] || continue
        p=$(cat "$f")
        if proc_running "$p"; then kill -KILL "$p" 2>/dev/null; fi
    done
    wait 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

now_ms() {
    local t=${EPOCHREALTIME/./}
    echo $((t / 1000))
}

# The state letter of a process, or nothing if it does not exist.
proc_state() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) } # comm may contain spaces; the state follows the last ')'
    echo "${stat%% *}"
}
# True if PID is one of our helper ranks, alive or zombie.
proc_present() {
    [ -n "$(proc_state "$1")" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$HELPER_COMM" ]
}
# True if PID is one of our helper ranks and has not died (zombies are dead).
proc_running() {
    local s
    s=$(proc_state "$1")
    [ -n "$s" ] && [ "$s" != Z ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$HELPER_COMM" ]
}

# Leak check: /dev/shm entries and socket files under /tmp (and $TMPDIR).
snapshot() {
    {
        ls -A /dev/shm 2>/dev/null | sed 's|^|shm: |'
        find /tmp ${TMPDIR:+"$TMPDIR"} -maxdepth 4 -type s 2>/dev/null | sed 's|^|socket: |'
    } | sort -u
}
SNAP_BEFORE=""
leak_begin() { SNAP_BEFORE=$(snapshot); }
leak_check() {
    local new
    new=$(comm -13 <(echo "$SNAP_BEFORE") <(snapshot))
    if [ -n "$new" ]; then
        fail "left behind: $(echo "$new" | tr '\n' ' ')"
    fi
}

# Start "ulnrun ... helper job DIR ACTOR ACTION OTHERS" in the background and
# wait until all N ranks have written their pid. Sets JOB_DIR, UPID, RANK_PIDS,
# T_READY (ms). Extra ulnrun options go in ULNRUN_OPTS (array).
ULNRUN_OPTS=()
start_job() {
    local n=$1 actor=$2 action=$3 others=$4
    JOB_DIR=$WORK/$sub
    mkdir -p "$JOB_DIR"
    "$ULNRUN" -n "$n" "${ULNRUN_OPTS[@]}" -- "$HELPER" job "$JOB_DIR" "$actor" "$action" \
        "$others" 2>"$JOB_DIR/stderr" &
    UPID=$!
    BG_PIDS+=("$UPID")
    local deadline=$(($(now_ms) + 20000)) count state
    while :; do
        # ulnrun's state is read before counting: if it had already ended
        # (a rank that acts at once can end the job quickly) the count is final.
        state=$(proc_state "$UPID")
        count=$(find "$JOB_DIR" -maxdepth 1 -name 'pid.*' | wc -l)
        [ "$count" -ge "$n" ] && break
        if [ "$(now_ms)" -gt "$deadline" ] || [ -z "$state" ] || [ "$state" = Z ]; then
            fail "only $count of $n ranks started"
            break
        fi
        sleep 0.01
    done
    T_READY=$(now_ms)
    read_rank_pids "$n"
}
# RANK_PIDS[r] = pid of rank r ("?" if it never reported).
read_rank_pids() {
    local r
    RANK_PIDS=()
    for ((r = 0; r < $1; r++)); do
        RANK_PIDS+=("$(cat "$JOB_DIR/pid.$r" 2>/dev/null || echo '?')")
    done
}

# Wait for ulnrun, at most 10 s; sets RC and ELAPSED (ms since the ranks were
# all up). A hung ulnrun is a failure, and is killed so the case still ends
# (its ranks then go by PR_SET_PDEATHSIG).
finish_job() {
    local deadline=$(($(now_ms) + 10000)) state
    while state=$(proc_state "$UPID") && [ -n "$state" ] && [ "$state" != Z ]; do
        if [ "$(now_ms)" -gt "$deadline" ]; then
            fail "ulnrun still running 10 s later; killing it"
            kill -KILL "$UPID"
            break
        fi
        sleep 0.005
    done
    ELAPSED=$(($(now_ms) - T_READY))
    wait "$UPID"
    RC=$?
}

expect_rc() {
    if [ "$RC" -ne "$1" ]; then
        fail "ulnrun exited $RC, want $1; its stderr: $(cat "$JOB_DIR/stderr")"
    fi
}
expect_fast() { # ulnrun must have finished within $1 ms of the ranks being up
    if [ "$ELAPSED" -ge "$1" ]; then fail "took ${ELAPSED} ms, want < $1 ms"; fi
}
expect_stderr() {
    if ! grep -qF -- "$1" "$JOB_DIR/stderr"; then
        fail "stderr lacks '$1'; it is: $(cat "$JOB_DIR/stderr")"
    fi
}
# ulnrun has exited, so it must have reaped every rank: nothing may be left,
# not even a zombie.
expect_ranks_gone() {
    local p
    for p in "${RANK_PIDS[@]}"; do
        if proc_present "$p"; then fail "rank pid $p still exists (state $(proc_state "$p"))"; fi
    done
}

# ---------------------------------------------------------------------------

case_env() {
    begin "ranks4"
    leak_begin
    # Stale job variables in ulnrun's own environment must be replaced, and a
    # background launch with SIGINT/SIGQUIT/SIGPIPE ignored must not leak that
    # state into the ranks.
    local out1 out2 rc
    out1=$( (trap '' INT QUIT PIPE
        ULN_RANK=99 ULN_SIZE=99 ULN_JOB_KEY=0000000000000001 ULN_BOOT_FD=0 \
            exec "$ULNRUN" -n 4 "$HELPER" env))
    rc=$?
    [ "$rc" -eq 0 ] || fail "ulnrun exited $rc"
    check_env_output "$out1" 4
    local key1=$ENV_KEY
    [ "$key1" != 0000000000000001 ] || fail "stale ULN_JOB_KEY was passed through"
    leak_check

    begin "new_key_each_run"
    leak_begin
    out2=$("$ULNRUN" -n 4 "$HELPER" env) || fail "ulnrun exited $?"
    check_env_output "$out2" 4
    [ "$key1" != "$ENV_KEY" ] || fail "two runs got the same job key $key1"
    leak_check

    # With stdin closed the board would be created as fd 0; a rank must not
    # find it on a standard descriptor (the helper checks fd > 2).
    begin "stdin_closed"
    leak_begin
    out1=$("$ULNRUN" -n 2 "$HELPER" env <&-) || fail "ulnrun exited $?"
    check_env_output "$out1" 2
    leak_check

    local n
    for n in 1 64; do
        begin "ranks$n"
        leak_begin
        out1=$("$ULNRUN" -n "$n" "$HELPER" env) || fail "ulnrun exited $?"
        check_env_output "$out1" "$n"
        leak_check
    done
}

# $1: the ranks' output, $2: N. Sets ENV_KEY.
check_env_output() {
    local out=$1 n=$2
    local lines
    lines=$(echo "$out" | grep -c '^rank=')
    [ "$lines" -eq "$n" ] || fail "$lines ranks reported, want $n: $out"
    local ranks want
    ranks=$(echo "$out" | sed -n 's/^rank=\([0-9]*\) .*/\1/p' | sort -n | tr '\n' ' ')
    want=$(seq 0 $((n - 1)) | tr '\n' ' ')
    [ "$ranks" = "$want" ] || fail "rank set is '$ranks', want '$want'"
    local sizes keys
    sizes=$(echo "$out" | grep -o ' size=[0-9]*' | sort -u)
    [ "$sizes" = " size=$n" ] || fail "sizes: $sizes"
    keys=$(echo "$out" | grep -o ' key=[0-9a-f]*' | sort -u)
    [ "$(echo "$keys" | wc -l)" -eq 1 ] || fail "ranks disagree on the key: $keys"
    ENV_KEY=${keys# key=}
    [[ $ENV_KEY =~ ^[0-9a-f]{16}$ ]] || fail "key '$ENV_KEY' is not 16 lowercase hex digits"
    local bytes=$((4096 + n * 256)) field
    for field in memfd=1 "bytes=$bytes" hdr=1 sealed=1 mask_empty=1 sig_dfl=1; do
        [ "$(echo "$out" | grep -c " $field\\b")" -eq "$n" ] || fail "not every rank has $field: $out"
    done
}

case_all_ok() {
    begin "all_exit_0"
    leak_begin
    start_job 4 -1 sleep exit:0
    finish_job
    expect_rc 0
    expect_ranks_gone
    if grep -q "ending the job" "$JOB_DIR/stderr"; then fail "unexpected: $(cat "$JOB_DIR/stderr")"; fi
    leak_check
}

# One rank fails, the others sleep: ulnrun passes the status on and the others
# go at once on SIGTERM, well inside the 2 s grace.
case_exit_code() {
    begin "rank_exits_3"
    leak_begin
    start_job 4 2 exit:3 sleep
    finish_job
    expect_rc 3
    expect_fast 2000
    expect_ranks_gone
    expect_stderr "ulnrun: rank 2 (pid ${RANK_PIDS[2]:-?}) exited with status 3; ending the job"
    leak_check
}

case_sigkill() {
    begin "rank_sigkill"
    leak_begin
    start_job 4 1 signal:9 sleep
    finish_job
    expect_rc 137
    expect_fast 2000
    expect_ranks_gone
    expect_stderr "ulnrun: rank 1 (pid ${RANK_PIDS[1]:-?}) killed by signal 9; ending the job"
    leak_check
}

case_abort() {
    begin "rank_abort"
    leak_begin
    start_job 3 0 abort sleep
    finish_job
    expect_rc 134
    expect_fast 2000
    expect_ranks_gone
    expect_stderr "killed by signal 6; ending the job"
    leak_check
}

# --keep-going: a rank killed by SIGKILL does not end the job; the others run
# to their own end (1.5 s) and ulnrun then exits with the death's status. A
# rank that exits 3 while others are fine gives 3.
case_keep_going() {
    begin "keep_going_sigkill"
    leak_begin
    ULNRUN_OPTS=(--keep-going)
    start_job 3 1 signal:9 pause:1500
    finish_job
    expect_rc 137
    [ "$ELAPSED" -ge 1300 ] || fail "ended after $ELAPSED ms: the survivors were not left to finish"
    expect_ranks_gone
    expect_stderr "ulnrun: rank 1 (pid ${RANK_PIDS[1]:-?}) killed by signal 9; the others go on (--keep-going)"
    if grep -q "ending the job" "$JOB_DIR/stderr"; then fail "unexpected: $(cat "$JOB_DIR/stderr")"; fi
    leak_check
    begin "keep_going_exit"
    leak_begin
    start_job 3 0 exit:3 pause:500
    finish_job
    ULNRUN_OPTS=()
    expect_rc 3
    expect_ranks_gone
    leak_check
}

# The other ranks ignore SIGTERM: ulnrun must escalate to SIGKILL after the
# 2 s grace, and not much later.
case_grace() {
    begin "sigkill_after_grace"
    leak_begin
    start_job 3 0 exit:5 ignore-term
    finish_job
    expect_rc 5
    [ "$ELAPSED" -ge 1800 ] || fail "ended after $ELAPSED ms: SIGKILL came before the grace"
    expect_fast 3500
    expect_ranks_gone
    expect_stderr "sending SIGKILL"
    leak_check
}

case_timeout() {
    local t0
    begin "timeout_1s"
    leak_begin
    t0=$(now_ms)
    ULNRUN_OPTS=(--timeout 1)
    start_job 4 -1 sleep sleep
    finish_job
    ULNRUN_OPTS=()
    expect_rc 124
    local total=$(($(now_ms) - t0))
    [ "$total" -lt 3500 ] || fail "timeout 1 s took $total ms"
    [ "$total" -ge 900 ] || fail "timeout 1 s fired after $total ms"
    expect_ranks_gone
    expect_stderr "ulnrun: timeout after 1 s; ending the job"
    leak_check

    begin "timeout_fraction"
    leak_begin
    ULNRUN_OPTS=(--timeout=0.3)
    t0=$(now_ms)
    start_job 2 -1 sleep ignore-term # needs the SIGKILL after the grace too
    finish_job
    ULNRUN_OPTS=()
    expect_rc 124
    total=$(($(now_ms) - t0))
    [ "$total" -lt 4500 ] || fail "timeout 0.3 s + grace took $total ms"
    expect_ranks_gone
    expect_stderr "timeout after 0.3 s"
    leak_check
}

# SIGINT/SIGTERM/SIGHUP to ulnrun: 128+signo, ranks gone. ulnrun runs in the
# background here, where bash starts it with SIGINT ignored: it must still act.
case_signals() {
    local sig code
    for sig in INT:130 TERM:143 HUP:129; do
        code=${sig#*:} sig=${sig%:*}
        begin "SIG$sig"
        if [ "$sig" = HUP ] && hup_ignored_here; then
            note "skipped: this shell was started with SIGHUP ignored (nohup) and cannot undo it"
            continue
        fi
        leak_begin
        start_job 3 -1 sleep sleep
        kill -s "$sig" "$UPID"
        finish_job
        expect_rc "$code"
        expect_fast 2000
        expect_ranks_gone
        expect_stderr "caught SIG$sig; ending the job"
        leak_check
    done

    # A second signal while the ranks ignore SIGTERM: SIGKILL at once, and the
    # status is still that of the first.
    begin "second_signal_kills"
    leak_begin
    start_job 3 -1 ignore-term ignore-term
    kill -TERM "$UPID"
    # Both pending at once would be read lowest number first; let ulnrun take
    # the first one before sending the second.
    local deadline=$(($(now_ms) + 10000))
    until grep -q "caught SIGTERM" "$JOB_DIR/stderr" || [ "$(now_ms)" -gt "$deadline" ]; do
        sleep 0.005
    done
    T_READY=$(now_ms)
    kill -INT "$UPID"
    finish_job
    expect_rc 143
    expect_fast 1500
    expect_ranks_gone
    expect_stderr "sending SIGKILL"
    leak_check

    # Ctrl-C at a terminal: SIGINT to the whole process group, ranks included.
    # One Ctrl-C must not escalate to SIGKILL, whichever death ulnrun sees first.
    begin "ctrl_c_process_group"
    if ! command -v setsid >/dev/null; then
        note "skipped: no setsid"
    else
        leak_begin
        local i
        for i in 1 2 3 4 5; do
            JOB_DIR=$WORK/ctrlc$i
            mkdir -p "$JOB_DIR"
            # Not a group leader (no job control here), so setsid execs in
            # place: $! is ulnrun, and its pid is the new group's id.
            setsid "$ULNRUN" -n 3 -- "$HELPER" job "$JOB_DIR" -1 sleep sleep 2>"$JOB_DIR/stderr" &
            UPID=$!
            BG_PIDS+=("$UPID")
            deadline=$(($(now_ms) + 20000))
            while [ "$(find "$JOB_DIR" -name 'pid.*' | wc -l)" -lt 3 ] &&
                [ "$(now_ms)" -lt "$deadline" ]; do
                sleep 0.01
            done
            read_rank_pids 3
            T_READY=$(now_ms)
            kill -INT -- "-$UPID"
            finish_job
            expect_rc 130
            expect_fast 1500
            expect_ranks_gone
            if grep -q SIGKILL "$JOB_DIR/stderr"; then
                fail "one Ctrl-C escalated to SIGKILL: $(cat "$JOB_DIR/stderr")"
            fi
        done
        leak_check
    fi

    # Started under nohup, ulnrun keeps ignoring SIGHUP, and so do the ranks.
    begin "nohup"
    leak_begin
    JOB_DIR=$WORK/nohup
    mkdir -p "$JOB_DIR"
    local p
    (
        trap '' HUP
        exec "$ULNRUN" -n 2 -- "$HELPER" job "$JOB_DIR" -1 sleep sleep 2>"$JOB_DIR/stderr"
    ) &
    UPID=$!
    BG_PIDS+=("$UPID")
    deadline=$(($(now_ms) + 20000))
    while [ "$(find "$JOB_DIR" -name 'pid.*' | wc -l)" -lt 2 ] && [ "$(now_ms)" -lt "$deadline" ]; do
        sleep 0.01
    done
    read_rank_pids 2
    kill -HUP "$UPID"
    for p in "${RANK_PIDS[@]}"; do kill -HUP "$p"; done
    sleep 0.3 # a negative check: nothing may happen
    if [ "$(proc_state "$UPID")" = Z ] || [ -z "$(proc_state "$UPID")" ]; then
        fail "ulnrun ended on SIGHUP under nohup"
    fi
    for p in "${RANK_PIDS[@]}"; do proc_running "$p" || fail "rank $p died of SIGHUP under nohup"; done
    T_READY=$(now_ms)
    kill -TERM "$UPID"
    finish_job
    expect_rc 143
    expect_ranks_gone
    leak_check
}

hup_ignored_here() {
    local ign
    ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)
    (((0x$ign >> 0) & 1)) # bit 0 is SIGHUP (signal 1)
}

# kill -9 of ulnrun: nothing can run in ulnrun any more; PR_SET_PDEATHSIG must
# take the ranks down within 1 s. They may linger as zombies if this system's
# init does not reap them, but they must not run.
case_kill9() {
    begin "kill9_ulnrun"
    leak_begin
    start_job 4 -1 sleep sleep
    # bash would report the "Killed" job on its stderr; that is the point here.
    exec 3>&2 2>/dev/null
    kill -KILL "$UPID"
    local t0 deadline p alive
    t0=$(now_ms)
    deadline=$((t0 + 1000))
    while :; do
        alive=""
        for p in "${RANK_PIDS[@]}"; do proc_running "$p" && alive="$alive $p"; done
        [ -z "$alive" ] && break
        if [ "$(now_ms)" -gt "$deadline" ]; then
            fail "ranks still running 1 s after kill -9 of ulnrun:$alive"
            break
        fi
        sleep 0.01
    done
    wait "$UPID"
    exec 2>&3 3>&-
    note "ranks gone $(($(now_ms) - t0)) ms after kill -9"
    leak_check
}

# kill -9 at random moments while ulnrun is still forking: a rank whose parent
# died before it armed PR_SET_PDEATHSIG must notice and not run on as an orphan.
case_kill9_early() {
    begin "kill9_while_starting"
    leak_begin
    # In a subshell with stderr discarded: bash would report each "Killed" job.
    (
        for i in $(seq 1 20); do
            mkdir -p "$WORK/early$i"
            "$ULNRUN" -n 8 -- "$HELPER" job "$WORK/early$i" -1 sleep sleep &
            sleep "0.0$((RANDOM % 3))$((RANDOM % 10))"
            kill -KILL "$!"
            wait "$!"
        done
    ) 2>/dev/null
    # Anything not dead whose command line names our scratch dir is a leftover:
    # a rank (helper) or a forked child that has not exec'd yet (still "ulnrun").
    local deadline=$(($(now_ms) + 2000)) left d cmd
    while :; do
        left=""
        for d in /proc/[0-9]*; do
            cmd=$(tr '\0' ' ' 2>/dev/null <"$d/cmdline") # empty for zombies
            if [[ $cmd == *"$WORK/early"* ]] && [ "$(proc_state "${d#/proc/}")" != Z ]; then
                left="$left ${d#/proc/}"
            fi
        done
        [ -z "$left" ] && break
        if [ "$(now_ms)" -gt "$deadline" ]; then
            fail "processes left running:$left"
            break
        fi
        sleep 0.02
    done
    leak_check
}

case_usage() {
    local rc out
    run_usage() { # $1: wanted status, rest: arguments
        local want=$1
        shift
        out=$("$ULNRUN" "$@" 2>&1 </dev/null)
        rc=$?
        if [ "$rc" -ne "$want" ]; then fail "'ulnrun $*' exited $rc, want $want: $out"; fi
    }
    begin "usage_errors"
    leak_begin
    run_usage 2
    run_usage 2 "$HELPER" env
    run_usage 2 -n 0 "$HELPER" env
    run_usage 2 -n -1 "$HELPER" env
    run_usage 2 -n abc "$HELPER" env
    run_usage 2 -n 4x "$HELPER" env
    run_usage 2 -n 4097 "$HELPER" env
    run_usage 2 -n 2
    run_usage 2 -n 2 --
    run_usage 2 -n 2 --timeout 0 "$HELPER" env
    run_usage 2 -n 2 --timeout -1 "$HELPER" env
    run_usage 2 -n 2 --timeout nan "$HELPER" env
    run_usage 2 -n 2 --timeout abc "$HELPER" env
    run_usage 2 -n 2 --bogus "$HELPER" env
    run_usage 2 -n
    leak_check

    begin "help"
    run_usage 0 -h
    echo "$out" | grep -q '^Usage: ulnrun -n N' || fail "-h printed: $out"
    run_usage 0 --help

    begin "program_options_untouched"
    # Options after the program belong to the program.
    run_usage 0 -n 2 sh -c 'exit 0' -n 5
    run_usage 0 -n 1 -- true

    begin "np"
    # mpirun's spelling, which MPI users type first: -np N and --np N are -n N.
    local sizes
    sizes=$("$ULNRUN" -np 3 sh -c 'echo "$ULN_SIZE"' 2>&1) || fail "ulnrun -np 3 exited $?: $sizes"
    [ "$sizes" = $'3\n3\n3' ] || fail "ulnrun -np 3 did not start 3 ranks of 3: $sizes"
    sizes=$("$ULNRUN" --np 2 --timeout 20 sh -c 'echo "$ULN_SIZE"' 2>&1) || fail "--np: $sizes"
    [ "$sizes" = $'2\n2' ] || fail "ulnrun --np 2 did not start 2 ranks of 2: $sizes"
    run_usage 2 -np abc "$HELPER" env
    # After the program, -np is the program's.
    out=$("$ULNRUN" -n 1 sh -c 'echo "$@"' x -np 5 2>&1)
    [ "$out" = "-np 5" ] || fail "the program's own -np was changed: $out"

    begin "missing_program"
    leak_begin
    out=$("$ULNRUN" -n 2 "$WORK/no-such-program" 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] || fail "nonexistent program: ulnrun exited 0"
    [ "$rc" -eq 127 ] || fail "nonexistent program: ulnrun exited $rc, want 127"
    echo "$out" | grep -q "cannot run" || fail "no message about the program: $out"
    out=$("$ULNRUN" -n 2 no-such-program-in-path-ulnrun 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] || fail "program not in PATH: ulnrun exited 0"

    begin "not_executable"
    echo "data" >"$WORK/not-exec"
    chmod 644 "$WORK/not-exec"
    out=$("$ULNRUN" -n 2 "$WORK/not-exec" 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] || fail "non-executable program: ulnrun exited 0"
    leak_check
}

case_uln_open() {
    if [ -z "$OPEN_CHECK" ]; then
        fail "no OPEN_CHECK program given"
        return
    fi
    local n out rc
    for n in 1 2 4; do
        begin "n$n"
        leak_begin
        out=$("$ULNRUN" -n "$n" --timeout 30 "$OPEN_CHECK" 2>"$WORK/open$n.stderr")
        rc=$?
        [ "$rc" -eq 0 ] || fail "ulnrun -n $n exited $rc: $(cat "$WORK/open$n.stderr")"
        [ "$(echo "$out" | grep -c '^OK rank')" -eq "$n" ] || fail "want $n OK lines, got: $out"
        note "$(echo "$out" | grep -c '^OK rank') of $n ranks said OK"
        leak_check
    done
}

# Settings as uln_open reads them in a job: every one checked at uln_open, one
# rank (rank 0) says what is wrong rather than all of them, a misspelt name is
# named with the setting meant, negatives are refused as such, sizes take K/M/G.
case_settings() {
    if [ -z "$OPEN_CHECK" ]; then
        fail "no OPEN_CHECK program given"
        return
    fi
    local out rc err=$WORK/settings.stderr
    # $1: wanted status (0 or 1 = failed), $2: pattern of the one ulnet line, rest: VAR=value...
    job3() {
        local want=$1 pat=$2
        shift 2
        out=$(env "$@" "$ULNRUN" -n 3 --timeout 30 "$OPEN_CHECK" 2>"$err")
        rc=$?
        if [ "$want" = 0 ] && [ "$rc" -ne 0 ]; then fail "$* : ulnrun exited $rc: $(cat "$err")"; fi
        if [ "$want" != 0 ] && [ "$rc" -eq 0 ]; then fail "$* : the job ran: $out"; fi
        local n
        n=$(grep -c "^ulnet: " "$err")
        [ "$n" -eq 1 ] || fail "$* : want one ulnet line on stderr, got $n: $(cat "$err")"
        grep -q -- "$pat" "$err" || fail "$* : stderr lacks '$pat': $(cat "$err")"
        if grep -q 18446744073709551615 "$err"; then fail "$* : a negative printed as 2^64-1"; fi
    }
    begin "typo_warned_once"
    job3 0 "ULN_RNG_BYTES is not a ulnet setting .*did you mean ULN_RING_BYTES?" ULN_RNG_BYTES=65536
    begin "negative"
    job3 1 "ULN_SQ_DEPTH=-1: negative values are not allowed (use a number in \[1, 1048576\])" \
        ULN_SQ_DEPTH=-1
    job3 1 "ULN_RING_BYTES=-4096: negative" ULN_RING_BYTES=-4096
    begin "size_suffixes"
    out=$(ULN_RING_BYTES=64K ULN_NAP_MAX=8k ULN_CHUNK_BYTES=1M ULN_POST_COPY_MAX=1G \
        "$ULNRUN" -n 2 --timeout 30 "$OPEN_CHECK" 2>&1) || fail "K/M/G sizes refused: $out"
    job3 1 "ULN_RING_BYTES=64Q is not a size" ULN_RING_BYTES=64Q
    job3 1 "ULN_SQ_DEPTH=1K is not a number in \[1, 1048576\]" ULN_SQ_DEPTH=1K
    # A word, like 0, is told the valid range
    job3 1 "ULN_SQ_DEPTH=banana is not a number in \[1, 1048576\]" ULN_SQ_DEPTH=banana
    job3 1 "ULN_RING_BYTES=big is not a size (bytes, K, M or G after it) in \[4096, " \
        ULN_RING_BYTES=big
    begin "checked_at_open"
    # Over shared memory no UDP socket is ever opened: these were once read only there.
    job3 1 "ULN_FAULT=drop=2: .*probability" ULN_TRANSPORT=shm ULN_FAULT=drop=2
    job3 1 "ULN_UDP_GRO=yes: use 0 or 1" ULN_TRANSPORT=shm ULN_UDP_GRO=yes
    job3 1 "ULN_UDP_ADDR=10.0.0 is not an IP address" ULN_TRANSPORT=shm ULN_UDP_ADDR=10.0.0
    job3 1 "ULN_BOOT_TIMEOUT=0 is outside" ULN_BOOT_TIMEOUT=0
}

CASES=(env all_ok exit_code sigkill abort grace timeout signals kill9 kill9_early keep_going usage
    uln_open settings)
if [ "$CASE" = all ]; then
    run=("${CASES[@]}")
    [ -n "$OPEN_CHECK" ] || run=("${run[@]/uln_open/}")
    [ -n "$OPEN_CHECK" ] || run=("${run[@]/settings/}")
else
    run=("$CASE")
fi
for c in "${run[@]}"; do
    [ -n "$c" ] || continue
    if ! declare -F "case_$c" >/dev/null; then
        echo "unknown case '$c'; known: ${CASES[*]}" >&2
        exit 2
    fi
    CASE=$c
    "case_$c"
done

if [ "$failed" -ne 0 ]; then
    echo "FAILED"
    exit 1
fi
echo "PASSED"
