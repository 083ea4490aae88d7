#!/usr/bin/env python3
"""bench/peers.py on real outputs of the peers, saved in samples/ on a
Debian 12 machine (ucx-utils 1.13, libfabric-bin 1.17, sockperf 3.7, iperf3
3.12): the numbers bench/compare and bench/netpeers put beside ulnet's must be
the ones the peer printed, in the units ulnperf uses. The *_netns samples,
sockperf_* and iperf3_* were saved by `bench/netpeers --save DIR` across two
network-namespace hosts."""
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


class FiNetwork(unittest.TestCase):
    def test_latency_across_hosts(self):
        r = peers.fi_pingpong_result(sample("fi_pingpong_udp_netns_8.txt"), 8)
        # 8  20k  =20k  312k  1.47s  0.22  36.69  0.03
        self.assertEqual(r["size"], 8)
        self.assertTrue(r["acked_all"])
        self.assertAlmostEqual(r["lat_us"], 36.69)

    def test_size_printed_cut_to_one_decimal(self):
        # -S 1196 prints "1.1k" (1126 B): the one row of a one-size run is it.
        text = sample("fi_pingpong_tcp_netns_1196.txt")
        self.assertEqual(peers.parse_fi_pingpong(text)[0]["size"], 1126)
        r = peers.fi_pingpong_result(text, 1196)
        self.assertAlmostEqual(r["lat_us"], 51.19)
        # Among several rows only an exact size is taken.
        self.assertIsNone(peers.fi_pingpong_result(sample("fi_pingpong_shm.txt"), 1196))
        self.assertEqual(peers.fi_pingpong_result(sample("fi_pingpong_shm.txt"), 4096)["lat_us"], 22.18)
        self.assertIsNone(peers.fi_pingpong_result(sample("fi_pingpong_badprov.txt"), 8))

    def test_bandwidth_is_both_directions(self):
        r = peers.fi_pingpong_result(sample("fi_pingpong_rxd_netns_1m.txt"), 1 << 20)
        # 1m  200  =200  400m  6.27s  66.89  15676.16: 2 x 200 x 1 MiB in 6.27 s
        self.assertAlmostEqual(r["MBps"], 66.89)
        self.assertAlmostEqual(r["MBps"], 2 * 200 * (1 << 20) / 6.27 / 1e6, delta=0.2)
        self.assertAlmostEqual(r["lat_us"], 15676.16)

    def test_providers_in_a_namespace(self):
        p = peers.fi_providers(sample("fi_info_netns.txt"))
        for name in ("udp", "tcp", "udp;ofi_rxd", "tcp;ofi_rxm", "shm"):
            self.assertIn(name, p)

    def test_max_msg_size(self):
        m = peers.fi_max_msg_size(sample("fi_info_udp_v.txt"))
        self.assertEqual(m[("udp", "dgram")], 1472)
        self.assertEqual(m[("udp;ofi_rxd", "rdm")], 2 ** 64 - 1)
        self.assertEqual(peers.fi_max_msg_size(""), {})


class Sockperf(unittest.TestCase):
    def test_udp_spinning(self):
        r = peers.parse_sockperf(sample("sockperf_udp_spin_14.txt"))
        # avg-latency=9.877 (std-dev=15.284); percentile 50.000 = 9.081: RTT/2 already
        self.assertFalse(r["round_trip"])
        self.assertAlmostEqual(r["lat_us"], 9.081)
        self.assertAlmostEqual(r["lat_avg_us"], 9.877)
        self.assertAlmostEqual(r["std_us"], 15.284)
        self.assertAlmostEqual(r["lat_p99_us"], 35.065)
        self.assertAlmostEqual(r["min_us"], 5.900)
        self.assertAlmostEqual(r["max_us"], 1613.593)
        self.assertAlmostEqual(r["percentiles"][99.999], 1557.694)
        self.assertEqual(r["observations"], 128784)
        self.assertEqual((r["sent"], r["received"], r["dropped"]), (128784, 128784, 0))
        self.assertAlmostEqual(r["runtime_s"], 2.55)

    def test_other_saved_runs(self):
        for name, p50, avg in (("sockperf_udp_block_1196.txt", 204.926, 228.248),
                               ("sockperf_tcp_spin_14.txt", 11.962, 28.405)):
            r = peers.parse_sockperf(sample(name))
            self.assertIsNotNone(r, name)
            self.assertAlmostEqual(r["lat_us"], p50, msg=name)
            self.assertAlmostEqual(r["lat_avg_us"], avg, msg=name)

    def test_full_rtt_is_halved(self):
        text = sample("sockperf_udp_block_1196_fullrtt.txt")
        r = peers.parse_sockperf(text)
        self.assertTrue(r["round_trip"])
        line = [l for l in text.splitlines() if "percentile 50.000" in l][0]
        rtt = float(line.split("=")[-1])
        self.assertEqual(r["p50_us"], rtt)
        self.assertAlmostEqual(r["lat_us"], rtt / 2)
        self.assertAlmostEqual(r["lat_avg_us"], r["avg_us"] / 2)

    def test_failed_runs(self):
        self.assertIsNone(peers.parse_sockperf(sample("sockperf_no_server.txt")))
        self.assertIn("No messages were received", peers.sockperf_error(sample("sockperf_no_server.txt")))
        self.assertIsNone(peers.parse_sockperf(sample("sockperf_bad_size.txt")))
        self.assertIn("Invalid message size: 8 (min: 14)", peers.sockperf_error(sample("sockperf_bad_size.txt")))
        self.assertIsNone(peers.parse_sockperf(""))
        self.assertIsNone(peers.parse_sockperf_tp(sample("sockperf_udp_spin_14.txt")))

    def test_throughput_counts_what_the_server_received(self):
        r = peers.parse_sockperf_tp(sample("sockperf_udp_tp_14.txt"))
        # client: "Total of 168493 messages sent in 2.001 sec";
        # server: "Total 132757 messages received and handled"
        self.assertEqual((r["sent"], r["received"]), (168493, 132757))
        self.assertAlmostEqual(r["rate_Mmsgps"], 132757 / 2.001 / 1e6)
        self.assertAlmostEqual(r["sent_Mmsgps"], 168493 / 2.001 / 1e6)
        # the client's part alone (a server ended without SIGINT) has no figure
        text = sample("sockperf_udp_tp_14.txt")
        self.assertIsNone(peers.parse_sockperf_tp(text[:text.index("[SERVER]")]))
        self.assertIsNone(peers.sockperf_error(sample("sockperf_udp_spin_14.txt")))


class Iperf3(unittest.TestCase):
    def test_tcp(self):
        r = peers.parse_iperf3_json(sample("iperf3_tcp.json"))
        # receiver: 3639869440 bytes in 5.002678 s
        self.assertEqual(r["protocol"], "TCP")
        self.assertEqual(r["blksize"], 131072)
        self.assertAlmostEqual(r["bw_GBps"], 3639869440 / 5.002678 / 1e9)
        self.assertEqual(r["retransmits"], 6697)
        self.assertNotIn("lost_percent", r)

    def test_tcp_1m_writes(self):
        r = peers.parse_iperf3_json(sample("iperf3_tcp_l1M.json"))
        self.assertEqual(r["blksize"], 1 << 20)
        self.assertAlmostEqual(r["bw_GBps"], 5494538240 / 5.006974 / 1e9)
        # iperf3's own bits per second, over 8e9: the same figure
        self.assertAlmostEqual(r["bw_GBps"], 8779016212.18724 / 8e9, places=6)

    def test_udp_counts_what_arrived(self):
        r = peers.parse_iperf3_json(sample("iperf3_udp.json"))
        self.assertEqual(r["protocol"], "UDP")
        self.assertEqual(r["blksize"], 1196)
        self.assertAlmostEqual(r["bw_GBps"], 350390924 / 5.001937 / 1e9)
        self.assertAlmostEqual(r["sent_GBps"], 401604840 / 5.001119 / 1e9)
        self.assertEqual((r["lost_packets"], r["packets"]), (42821, 335790))
        self.assertAlmostEqual(r["lost_percent"], 12.752315435242265)

    def test_refused(self):
        self.assertIsNone(peers.parse_iperf3_json(sample("iperf3_refused.json")))
        self.assertEqual(peers.iperf3_error(sample("iperf3_refused.json")),
                         "unable to connect to server: Connection refused")
        self.assertIsNone(peers.parse_iperf3_json("not json"))
        self.assertIsNone(peers.iperf3_error(sample("iperf3_tcp.json")))
        self.assertEqual(peers.iperf3_error("iperf3: error - unable to connect to server: Connection refused\n"),
                         "unable to connect to server: Connection refused")


class UdpBlast(unittest.TestCase):
    def test_both_sides(self):
        got = peers.parse_udp_blast(sample("udp_blast_recv_netns.txt"))
        sent = peers.parse_udp_blast(sample("udp_blast_send_netns.txt"))
        self.assertEqual((got["bytes"], got["dgrams"], got["lost"]), (4184905200, 2989218, 0))
        self.assertAlmostEqual(got["GBps"], 4.185)
        self.assertAlmostEqual(got["secs"], 1.0)
        self.assertEqual(sent["dgrams"], got["dgrams"])
        self.assertNotIn("lost", sent)

    def test_nothing_received(self):
        self.assertIsNone(peers.parse_udp_blast(sample("udp_blast_nothing.txt")))
        self.assertIsNone(peers.parse_udp_blast(""))


class UlnetOverUdp(unittest.TestCase):
    def test_why_it_did_not_run(self):
        self.assertEqual(peers.ulnet_failure(sample("ulnperf_udp_unavailable.txt")),
                         "ulnet: ULN_SIZE=2 but no ULN_BOOT_FD; start ranks with ulnrun")
        self.assertEqual(peers.ulnet_failure("ulnperf: rank 1: uln_open: invalid argument\n"),
                         "ulnperf: uln_open: invalid argument")
        self.assertEqual(peers.ulnet_failure("# pinned: rank 0 -> cpu 0\nsomething else\n"), "something else")
        self.assertIsNone(peers.ulnet_failure(""))

    def test_csv_rows_without_platform(self):
        rows = peers.ulnperf_csv_rows(sample("ulnperf_shm_lat.csv"))
        self.assertEqual([r[:4] for r in rows], [("shm", "nap", "lat", 8), ("shm", "nap", "lat_p99", 8),
                                                 ("shm", "nap", "lat", 1196), ("shm", "nap", "lat_p99", 1196)])
        self.assertEqual(rows[0][4:], (0.110205, "us"))
        self.assertRaises(ValueError, peers.ulnperf_csv_rows, "")


class NetPipe(unittest.TestCase):
    """NPopenmpi (netpipe-openmpi 3.7) under mpirun, saved by bench/mpi --save."""

    def test_latency_8(self):
        # "  0:       8 bytes   2000 times -->    131.33 Mbps in       0.46 usec"
        r = peers.parse_netpipe(sample("netpipe_vader_8.txt"))
        self.assertEqual(len(r), 1)
        self.assertEqual((r[0]["size"], r[0]["times"]), (8, 2000))
        self.assertAlmostEqual(r[0]["lat_us"], 0.46)
        # NetPIPE's Mbps are 2^20 bits/s over the one-way time.
        self.assertAlmostEqual(r[0]["bw_GBps"], 131.33 * 1048576 / 8e9)
        self.assertAlmostEqual(r[0]["bw_GBps"], 8 / 0.46e-6 / 1e9, delta=0.001)

    def test_bandwidth_1m_across_hosts(self):
        r = peers.parse_netpipe(sample("netpipe_ofi_tcp_netns_1m.txt"))
        self.assertEqual([(x["size"], x["times"]) for x in r], [(1048576, 40)])
        self.assertAlmostEqual(r[0]["bw_GBps"], 2290.41 * 1048576 / 8e9)
        self.assertAlmostEqual(r[0]["bw_GBps"], 1048576 / 3492.83e-6 / 1e9, delta=0.001)

    def test_sweep(self):
        r = peers.parse_netpipe(sample("netpipe_vader_sweep.txt"))
        self.assertEqual(len(r), 35)
        self.assertEqual((r[0]["size"], r[-1]["size"]), (8, 1048576))
        self.assertAlmostEqual(r[-1]["lat_us"], 2737.00)
        self.assertEqual([x["size"] for x in r], sorted(x["size"] for x in r))

    def test_failed_job(self):
        text = sample("netpipe_no_pml.txt")
        self.assertEqual(peers.parse_netpipe(text), [])
        self.assertEqual(peers.mpi_failure(text), "No components were able to be opened in the pml framework.")
        self.assertIsNone(peers.mpi_failure(""))
        self.assertEqual(peers.mpi_failure("a\nlast words\n"), "last words")


class UlnperfCsv(unittest.TestCase):
    def test_rows(self):
        d = peers.parse_ulnperf_csv("transport,op,test,size,value,unit\n"
                                    "platform,cacheline,lat,64,0.2550,us\n"
                                    "shm,nap,lat,8,0.371,us\n")
        self.assertEqual(d[("shm", "nap", "lat", 8)], 0.371)
        self.assertEqual(d[("platform", "cacheline", "lat", 64)], 0.255)

    def test_not_a_csv(self):
        self.assertRaises(ValueError, peers.parse_ulnperf_csv, "a,b\n")


class MpiRatios(unittest.TestCase):
    """bench/mpi's line against Open MPI's own TCP, exactly in the issue's form."""

    def test_both_rows(self):
        med = {("ob1tcp-net", "lat", 8): 8.0, ("ob1tcp-net", "bw", 1 << 20): 2.0,
               ("ulnet-net", "lat", 8): 6.0, ("ulnet-net", "bw", 1 << 20): 3.0,
               ("ulnetxdp-net", "lat", 8): 4.0, ("ulnetxdp-net", "bw", 1 << 20): 2.5}
        self.assertEqual(peers.mpi_ratios_vs_ob1(med, 8, 1 << 20),
                         "ratios vs ob1 tcp: ulnet-net lat 0.750 bw 1.500; ulnetxdp-net lat 0.500 bw 1.250")

    def test_missing_figures(self):
        med = {("ob1tcp-net", "lat", 8): 8.0, ("ulnet-net", "lat", 8): 6.0, ("ulnet-net", "bw", 1 << 20): 3.0}
        self.assertEqual(peers.mpi_ratios_vs_ob1(med, 8, 1 << 20),
                         "ratios vs ob1 tcp: ulnet-net lat 0.750 bw -; ulnetxdp-net lat - bw -")
        self.assertEqual(peers.mpi_ratios_vs_ob1({}, 8, 1 << 20),
                         "ratios vs ob1 tcp: ulnet-net lat - bw -; ulnetxdp-net lat - bw -")


class XdpFallback(unittest.TestCase):
    def test_reason(self):
        err = ("some noise\nulnet: xdp: cannot bind an AF_XDP socket to eth0 queue 0: no privilege; using udp\n")
        self.assertEqual(peers.xdp_fallback(err), "cannot bind an AF_XDP socket to eth0 queue 0: no privilege; using udp")

    def test_second_endpoint_is_no_failure(self):
        err = "ulnet: xdp: cannot bind an AF_XDP socket to eth0 queue 0: the queue has an AF_XDP socket already; using udp\n"
        self.assertIsNone(peers.xdp_fallback(err))
        self.assertIsNone(peers.xdp_fallback(""))
        self.assertIsNone(peers.xdp_fallback("ulnet: auto: eth0 (veth): no zero-copy; using udp\n"))


if __name__ == "__main__":
    unittest.main()
