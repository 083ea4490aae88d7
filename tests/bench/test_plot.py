#!/usr/bin/env python3
"""bench/plot's titles and legends on made-up CSVs (no ulnperf, no peer, no
gnuplot needed): each title says what is drawn and nothing else, the legends
are words, libfabric's bandwidth rows are drawn, every plot names the
cache-line floor its rows were taken at."""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "..", "bench", "plot")
sys.path.insert(0, HERE)
import plot_titles  # noqa: E402

ULNET = """transport,op,test,size,value,unit
platform,cacheline,lat,64,0.058,us
shm,nap,lat,8,0.11,us
shm,nap,lat,1024,0.2,us
shm,nap,bw,65536,3,GB/s
shm,put,rate_w1,8,5,Mmsg/s
shm,put,rate_w8,8,9,Mmsg/s
shm,nap-3s,load,50,0.3,us
shm,nap-3s,load_p99,50,1.3,us
shm,put,cache_warm,4096,1.3,us
shm,put,fair_ep0,10,0.5,share
shm,put,fair_ep1,10,0.5,share
platform,cacheline,lat_end,64,0.246,us
"""
PEERS = """transport,op,test,size,value,unit
ucx,put,lat,8,0.3,us
ucx,put,bw,65536,5,GB/s
fi-shm,msg,lat,8,0.9,us
fi-udp-rxd,pingpong,bw,65536,0.4,GB/s
mpi-vader,netpipe,lat,8,0.5,us
"""


def plot(tmp, name, *texts):
    paths = []
    for i, t in enumerate(texts):
        paths.append(os.path.join(tmp, "%s.%d.csv" % (name, i)))
        with open(paths[-1], "w") as f:
            f.write(t)
    d = os.path.join(tmp, name)
    # No gnuplot run: the scripts are what is checked.
    env = dict(os.environ, PATH="/nonexistent")
    subprocess.run([sys.executable, PLOT, d] + paths, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    err = plot_titles.check(d, paths)
    assert err is None, err
    return {f[:-3]: open(os.path.join(d, f)).read() for f in os.listdir(d) if f.endswith(".gp")}


def title(gp):
    return re.search(r'^set title "(.*)"$', gp, re.M).group(1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        gp = plot(tmp, "all", ULNET, PEERS)
        assert sorted(gp) == ["bandwidth", "cache", "fair_shm_put", "latency", "load", "rate"], gp
        lat, bw = title(gp["latency"]), title(gp["bandwidth"])
        # Only NAP latency rows: no GET note, no bidirectional note.
        assert "GET" not in lat and "bidirectional" not in bw, (lat, bw)
        assert "UCX" in lat and "fi_pingpong shm" in lat and "NetPIPE" in lat, lat
        # libfabric's bandwidth row is a series of the bandwidth plot.
        assert "title 'fi_pingpong udp;ofi_rxd ping-pong bandwidth'" in gp["bandwidth"], gp["bandwidth"]
        assert "title 'UCX ucp_put_lat'" in gp["latency"], gp["latency"]
        assert "title 'ulnet shm NAP one-way latency'" in gp["latency"], gp["latency"]
        assert "title 'ulnet shm NAP, 3 senders, p99'" in gp["load"], gp["load"]
        assert "3 senders" in title(gp["load"]) and "nap-3s" not in gp["load"], gp["load"]
        # Only warm rows: the title does not promise a first touch.
        assert title(gp["cache"]).startswith("Warm"), title(gp["cache"])
        for g in gp.values():
            assert "cache-line floor 0.058 us at the start, 0.246 us at the end (one core complex, then two)" \
                in title(g).replace("\\n", " "), title(g)
        # GET and bibw rows: now the notes are there.
        more = ULNET + "shm,get,lat,8,0.4,us\nshm,nap,bibw,65536,5,GB/s\n"
        gp = plot(tmp, "more", more)
        assert "GET: full round trip" in title(gp["latency"]), title(gp["latency"])
        assert "bidirectional" in title(gp["bandwidth"]), title(gp["bandwidth"])
        assert "title 'ulnet shm NAP bidirectional bandwidth'" in gp["bandwidth"], gp["bandwidth"]
        # No floor in the CSVs: the plots say the placement is unknown.
        gp = plot(tmp, "nofloor", PEERS)
        assert all("placement unknown" in title(g) for g in gp.values()), gp
        assert sorted(gp) == ["bandwidth", "latency"], gp
        # A floor far above a cache line's crossing: the CPUs were busy.
        gp = plot(tmp, "busy", "platform,cacheline,lat,64,62.3,us\nshm,nap,lat,8,1,us\n")
        assert "(CPUs busy or shared)" in title(gp["latency"]), title(gp["latency"])
    print("test_plot: all checks passed")


if __name__ == "__main__":
    main()
