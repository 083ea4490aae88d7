#!/usr/bin/env python3
"""forge.py IFACE SRC_IP DST_IP DST_MAC PORT COUNT - send malformed and
forged Ethernet/IPv4/UDP frames to a ulnet AF_XDP endpoint at DST_IP:PORT,
as if from its peer SRC_IP:PORT: bad checksums, lengths that lie, IP options,
fragments, truncated headers, garbage payloads with valid checksums. The
link must drop what is not an intact datagram (rx_bad_frame), the protocol
what is not its own, and the job must go on unharmed."""
import random
import socket
import struct
import sys

iface, src, dst, dst_mac, port, count = sys.argv[1:7]
port, count = int(port), int(count)
src_b, dst_b = socket.inet_aton(src), socket.inet_aton(dst)
mac = bytes.fromhex(dst_mac.replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
src_mac = s.getsockname()[4]
rng = random.Random(16)


def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF


def frame(payload, *, ihl=5, frag=0x4000, tot_delta=0, ulen_delta=0, bad_ip=False,
          bad_udp=False, cut=0):
    opts = b"\x01" * (4 * (ihl - 5))  # NOPs
    ulen = 8 + len(payload) + ulen_delta
    udp = struct.pack("!HHHH", port, port, ulen & 0xFFFF, 0) + payload
    ph = src_b + dst_b + struct.pack("!BBH", 0, 17, 8 + len(payload))
    c = csum(ph + udp) or 0xFFFF
    if bad_udp:
        c ^= 0x5A5A
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    tot = 4 * ihl + len(udp) + tot_delta
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, tot & 0xFFFF, rng.randrange(65536), frag,
                     64, 17, 0, src_b, dst_b) + opts
    c = csum(ip) ^ (0x1111 if bad_ip else 0)
    ip = ip[:10] + struct.pack("!H", c) + ip[12:]
    f = mac + src_mac + b"\x08\x00" + ip + udp
    return f[:len(f) - cut] if cut else f


def garbage(n):
    return bytes(rng.randrange(256) for _ in range(n))


kinds = [
    lambda: frame(garbage(40), bad_udp=True),
    lambda: frame(garbage(40), bad_ip=True),
    lambda: frame(garbage(40), ulen_delta=30),
    lambda: frame(garbage(40), ulen_delta=-20),
    lambda: frame(garbage(40), tot_delta=100),
    lambda: frame(garbage(40), tot_delta=-30),
    lambda: frame(garbage(64), ihl=7),  # options: intact, garbage for the protocol
    lambda: frame(garbage(40), frag=0x2000),  # more fragments: the kernel's
    lambda: frame(garbage(40), cut=45),  # UDP header cut short
    lambda: frame(garbage(rng.randrange(0, 200))),  # intact, garbage payload
    lambda: frame(garbage(1600)),  # longer than the MTU
]
sent = 0
for i in range(count):
    try:
        s.send(kinds[i % len(kinds)]())
        sent += 1
    except OSError:  # too long for the device: that one cannot be sent at all
        pass
print("forge.py: sent %d forged frames to %s:%d" % (sent, dst, port))
