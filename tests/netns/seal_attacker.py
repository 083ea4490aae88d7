#!/usr/bin/env python3
"""seal_attacker.py - an attacker on the path of a ulnet job (seal_attack.sh).

    seal_attacker.py DIR MODE ADDR_A ADDR_B

Runs on a third host of the bridge, which floods every frame to every port
(as a shared segment or a mirrored switch port would). It captures the UDP
datagrams between ADDR_A and ADDR_B (an AF_PACKET socket on eth0) until
DIR/traffic_done appears, writes their payloads to DIR/capture.bin, then
sends, from the members' own addresses and ports (raw IPv4, source spoofed):

    replay    captured datagrams again, as they were
    flip_hdr  captured datagrams with one bit of the first 36 bytes flipped
    flip_pay  ... with one bit flipped past them
    cut       ... cut to half their length, and to 10 bytes
    reorder   captured datagrams in reverse order
    forge     four PUTs into B's region at offset 0 ("FORGED BY THE PATH!..."),
              made from the last PUT A sent B: the next sequence numbers, the
              tag, region key and offset it carried (docs/protocol.md); under
              encrypt the headers cannot be read, so the forgery is the last
              datagram of that size with the payload overwritten. Under MODE
              off, sent first and again until B says it landed
              (DIR/forged_seen): the test shows what off allows, every time.

and writes DIR/attack_done with a line per kind and "injected N".
"""
import os
import socket
import struct
import sys
import time

ETH_P_IP = 0x0800
HDR = 36
TRAILER = 26  # a sealed datagram's counter, length and tag (src/seal/seal.h)


PACKET_OUTGOING = 4  # sll_pkttype of a frame this host sent: the attacker's own


def frame_udp(frame, a, b):
    """(src, dst, sport, dport, payload) of a UDP datagram between a and b, or None."""
    ip = frame[14:]
    if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
        return None
    ihl = (ip[0] & 15) * 4
    src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
    if {src, dst} != {a, b}:
        return None
    sport, dport, ulen = struct.unpack("!HHH", ip[ihl:ihl + 6])
    return (src, dst, sport, dport, bytes(ip[ihl + 8:ihl + ulen]))


def drain(s, a, b, got):
    """Appends what the socket holds now (never the attacker's own frames)."""
    s.setblocking(False)
    while True:
        try:
            frame, addr = s.recvfrom(70000)
        except BlockingIOError:
            return
        d = frame_udp(frame, a, b)
        if d and addr[2] != PACKET_OUTGOING:
            got.append(d)


def capture(dir_, a, b):
    """Everything between a and b until DIR/traffic_done, and the open socket.

    Once traffic_done is there, the socket is read until it stays empty for
    0.3 s: a loaded host reads frames long after they arrived, and the
    forgery needs the newest sequence numbers."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)  # miss nothing under load
    s.bind(("eth0", 0))
    open(os.path.join(dir_, "capturing"), "w").close()
    got = []
    done = os.path.join(dir_, "traffic_done")
    quiet = seen_done = None
    while True:
        s.settimeout(0.1)
        try:
            frame, addr = s.recvfrom(70000)
        except socket.timeout:
            if os.path.exists(done):
                quiet = quiet or time.monotonic()
                seen_done = seen_done or quiet
                if time.monotonic() - quiet >= 0.3 or time.monotonic() - seen_done >= 5:
                    break
            continue
        quiet = None
        d = frame_udp(frame, a, b)
        if d and addr[2] != PACKET_OUTGOING:
            got.append(d)
    return got, s


def send_all(pkts):
    """Sends (src, dst, sport, dport, payload) from src, as if it were src."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    for src, dst, sport, dport, pay in pkts:
        udp = struct.pack("!HHHH", sport, dport, 8 + len(pay), 0) + pay  # no checksum: allowed
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                         socket.inet_aton(src), socket.inet_aton(dst))  # the kernel sums it
        s.sendto(ip + udp, (dst, 0))
        time.sleep(0.001)  # no drops for want of buffer: each one must arrive
    s.close()


def flip(p, byte, bit):
    b = bytearray(p)
    b[byte % len(b)] ^= 1 << bit
    return bytes(b)


def packets(pay):
    """The packets of a datagram read as plaintext (a bundle is several)."""
    at = 0
    while len(pay) - at >= HDR:
        vt, flags, _, _, seq, _, key, off, ln = struct.unpack_from("<BBHIIIQQI", pay, at)
        if ln < HDR or at + ln > len(pay):
            return
        yield at, vt, flags, seq, ln
        at += ln
        if not flags & 0x80:
            return


def forge(got, a, b, ahead):
    """A PUT of A into B's region at 0, `ahead` seqs past the last seen, or None."""
    last, top = None, None
    for src, dst, sport, dport, pay in got:
        if src != a:
            continue
        for at, vt, flags, seq, ln in packets(pay):
            if vt >> 4 != 2 or not flags & 0x01:  # version 2, DATA
                continue
            if top is None or (seq - top) % 2**32 < 2**31:
                top = seq
            if vt & 15 == 2 and ln == HDR + 24 + 64 and flags & 0x20:  # a small PUT, LAST
                last = (src, dst, sport, dport, pay[at:at + ln])
    if last is None or top is None:
        return None
    src, dst, sport, dport, p = last
    p = bytearray(p)
    p[1] = 0x01 | 0x20  # DATA, LAST: no feedback, no resend mark, nothing bundled
    struct.pack_into("<I", p, 8, (top + ahead) % 2**32)  # the next sequence numbers
    struct.pack_into("<Q", p, HDR, 1 << 60)  # an op id of nobody's
    p[HDR + 24:] = b"FORGED BY THE PATH!!" + b"!" * (64 - 20)
    return (src, dst, sport, dport, bytes(p))


def forge_until_seen(dir_, s, got, a, b, deadline=60):
    """ULN_SECURE=off: forge PUTs until B says one landed (DIR/forged_seen).

    Each try reads what A sent meanwhile first, so the sequence numbers are
    the next ones, and reaches a little further ahead than the last (should
    the capture still have missed A's newest): a PUT ahead of order is
    placed on arrival. Returns the PUTs sent."""
    sent = []
    seen = os.path.join(dir_, "forged_seen")
    end = time.monotonic() + deadline
    tries = 0
    while not os.path.exists(seen) and time.monotonic() < end:
        drain(s, a, b, got)
        batch = [f for f in (forge(got, a, b, k) for k in range(1, 5 + 4 * min(tries, 8))) if f]
        if not batch:
            sys.exit("seal_attacker: no PUT of A's to forge from")
        send_all(batch)
        sent += batch
        tries += 1
        for _ in range(20):  # up to 0.2 s for B to look
            if os.path.exists(seen):
                break
            time.sleep(0.01)
    if not os.path.exists(seen):
        sys.exit(f"seal_attacker: no forged PUT landed in {deadline} s ({tries} tries)")
    return sent


def main():
    dir_, mode, a, b = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    got, sock = capture(dir_, a, b)
    with open(os.path.join(dir_, "capture.bin"), "wb") as f:
        for *_, pay in got:
            f.write(pay)
    if len(got) < 100:
        sys.exit(f"seal_attacker: only {len(got)} datagrams captured")
    ab = [g for g in got if g[0] == a]
    ba = [g for g in got if g[0] == b]
    big = [g for g in got if len(g[4]) > 200]
    plan = {
        "replay": ab[-40:] + ba[-20:],
        "flip_hdr": [(s, d, sp, dp, flip(p, 8 + i % 28, i % 8))
                     for i, (s, d, sp, dp, p) in enumerate(ab[-30:] + ba[-10:])],
        "flip_pay": [(s, d, sp, dp, flip(p, 100 + 7 * i, i % 8))
                     for i, (s, d, sp, dp, p) in enumerate(big[-30:])],
        "cut": [(s, d, sp, dp, p[:len(p) // 2]) for s, d, sp, dp, p in ab[-10:]] +
               [(s, d, sp, dp, p[:10]) for s, d, sp, dp, p in ab[-5:]],
        "reorder": list(reversed(ab[-30:])),
    }
    n = 0
    lines = []
    if mode == "off":
        # the forgery first, until it lands: the replays and flips after it
        # may move B's window past where it would
        plan["forge"] = forge_until_seen(dir_, sock, got, a, b)
    else:
        # four PUTs at the next sequence numbers: should the capture have
        # missed A's last, one is still new (a PUT ahead of order is placed
        # on arrival), and must be refused as the rest
        forged = [f for f in (forge(got, a, b, k) for k in range(1, 5)) if f]
        if not forged:  # encrypt: nothing to read; the same size, the payload overwritten
            size = HDR + 24 + 64 + TRAILER
            same = [g for g in ab if len(g[4]) == size]
            for s, d, sp, dp, p in same[-4:]:
                forged.append((s, d, sp, dp,
                               p[:HDR + 24] + b"FORGED BY THE PATH!!" + b"!" * 44 + p[-TRAILER:]))
        plan["forge"] = forged
        send_all(forged)
    sock.close()
    n += len(plan["forge"])
    lines.append(f"forge {len(plan['forge'])}")
    for k in ["replay", "flip_hdr", "flip_pay", "cut", "reorder"]:
        send_all(plan[k])
        n += len(plan[k])
        lines.append(f"{k} {len(plan[k])}")
    time.sleep(0.5)  # let the last ones arrive before the job reads on
    with open(os.path.join(dir_, "attack_done.tmp"), "w") as out:
        out.write("\n".join(lines) + f"\ncaptured {len(got)}\ninjected {n}\n")
    os.rename(os.path.join(dir_, "attack_done.tmp"), os.path.join(dir_, "attack_done"))


if __name__ == "__main__":
    main()
