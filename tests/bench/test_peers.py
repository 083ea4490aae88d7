#!/usr/bin/env python3
"""bench/peers.py on real outputs of the peers, saved in samples/ on a
Debian 12 machine (ucx-utils 1.13, libfabric-bin 1.17): the numbers
bench/compare puts beside ulnet's must be the ones the peer printed, in the
units ulnperf uses."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# No __pycache__ next to the sources: bench/ is not a package.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import peers  # noqa: E402


def sample(name):
    with open(os.path.join(HERE, "samples", name)) as f:
        return f.read()


class Ucx(unittest.TestCase):
    def test_latency(self):
        r = peers.parse_ucx_perftest(sample("ucx_tag_lat_8.txt"))
        # Final: 100000 0.090 0.096 0.096 79.86 79.86 10467964 10467964
        self.assertEqual(r["iters"], 100000)
        self.assertAlmostEqual(r["lat_p50_us"], 0.090)
        self.assertAlmostEqual(r["lat_avg_us"], 0.096)
        self.assertAlmostEqual(r["rate_Mmsgps"], 10.467964)

    def test_bandwidth_is_in_decimal_gigabytes(self):
        r = peers.parse_ucx_perftest(sample("ucx_put_bw_64k.txt"))
        # 36471.95 MB/s of 2^20 bytes = 38.24 GB/s; and it agrees with
        # message rate x size: 583551 x 65536 B.
        self.assertAlmostEqual(r["bw_GBps"], 36471.95 * 1048576 / 1e9, places=6)
        self.assertAlmostEqual(r["bw_GBps"], 583551 * 65536 / 1e9, delta=0.01)

    def test_other_saved_runs(self):
        for name, field, value in (("ucx_am_lat_8.txt", "lat_p50_us", 0.050),
                                   ("ucx_get_1m.txt", "rate_Mmsgps", 0.031410),
                                   ("ucx_put_bw_8.txt", "rate_Mmsgps", 36.369426),
                                   ("ucx_tag_bw_8.txt", "rate_Mmsgps", 12.842720)):
            r = peers.parse_ucx_perftest(sample(name))
            self.assertIsNotNone(r, name)
            self.assertAlmostEqual(r[field], value, places=6, msg=name)

    def test_failed_run_has_no_result(self):
        self.assertIsNone(peers.parse_ucx_perftest(sample("ucx_bad_test.txt")))
        self.assertIsNone(peers.parse_ucx_perftest(""))
        self.assertIsNone(peers.parse_ucx_perftest("Final: 10 0.1\n"))


class FiPingpong(unittest.TestCase):
    def test_shm_all_sizes(self):
        rows = peers.parse_fi_pingpong(sample("fi_pingpong_shm.txt"))
        self.assertEqual([r["size"] for r in rows], [64, 256, 1024, 4096, 65536, 1048576])
        self.assertTrue(all(r["acked_all"] for r in rows))
        first = rows[0]
        text = sample("fi_pingpong_shm.txt").splitlines()[1].split()
        self.assertEqual(first["lat_us"], float(text[6]))
        self.assertEqual(first["MBps"], float(text[5]))
        self.assertEqual(first["time_s"], float(text[4].rstrip("s")))

    def test_tcp(self):
        rows = peers.parse_fi_pingpong(sample("fi_pingpong_tcp.txt"))
        self.assertEqual(len(rows), 6)
        self.assertEqual(rows[-1]["size"], 1 << 20)
        self.assertAlmostEqual(rows[-1]["lat_us"], 7349.53)

    def test_udp_run_cut_short_keeps_the_sizes_it_finished(self):
        rows = peers.parse_fi_pingpong(sample("fi_pingpong_udp.txt"))
        self.assertEqual([r["size"] for r in rows], [64, 256, 1024])

    def test_failed_run(self):
        self.assertEqual(peers.parse_fi_pingpong(sample("fi_pingpong_badprov.txt")), [])
        self.assertEqual(peers.parse_fi_pingpong(""), [])

    def test_size_strings(self):
        for s, v in (("64", 64), ("4k", 4096), ("1m", 1 << 20), ("1.5k", 1536), ("2g", 2 << 30)):
            self.assertEqual(peers._fi_size(s), v)
        self.assertRaises(ValueError, peers._fi_size, "x")

    def test_mismatched_acks(self):
        text = ("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n"
                "8       10k     +3       156k        0.02s     10.40       0.77       1.30\n")
        (r,) = peers.parse_fi_pingpong(text)
        self.assertFalse(r["acked_all"])

    def test_providers(self):
        self.assertEqual(peers.fi_providers(sample("fi_info_shm.txt")), ["shm"])


class UlnperfCsv(unittest.TestCase):
    def test_rows(self):
        d = peers.parse_ulnperf_csv("transport,op,test,size,value,unit\n"
                                    "platform,cacheline,lat,64,0.2550,us\n"
                                    "shm,nap,lat,8,0.371,us\n")
        self.assertEqual(d[("shm", "nap", "lat", 8)], 0.371)
        self.assertEqual(d[("platform", "cacheline", "lat", 64)], 0.255)

    def test_not_a_csv(self):
        self.assertRaises(ValueError, peers.parse_ulnperf_csv, "a,b\n")


if __name__ == "__main__":
    unittest.main()
