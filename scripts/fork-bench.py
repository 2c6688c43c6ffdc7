"""Requests per second through Python's ForkingTCPServer: one fork per connection.

    python3 scripts/fork-bench.py HOST N            # on the kernel's sockets (HOST 127.0.0.1)
    shmnet run --server SOCK -- python3 scripts/fork-bench.py HOST N   # under shmnet run

The script forks its own server (listening on HOST, a free port) and then opens N
connections to it one after another, each sending a line and reading it back; it prints
one JSON line: requests per second and the median and 99th-percentile latency of one
request (connect, the server's fork, the echo, close). docs/benchmarks.md, "fork".
"""
import json, os, signal, socket, socketserver, sys, time

host, n = sys.argv[1], int(sys.argv[2])


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        self.wfile.write(self.rfile.readline())


class Server(socketserver.ForkingTCPServer):
    allow_reuse_address = True


srv = Server((host, 0), Echo)
port = srv.socket.getsockname()[1]  # after listen: under shmnet run a bound port 0 is chosen at listen
pid = os.fork()
if pid == 0:
    srv.serve_forever()
    os._exit(0)
srv.socket.close()
lat = []
t0 = time.perf_counter()
for _ in range(n):
    a = time.perf_counter()
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(b"x\n")
    got = b""
    while not got.endswith(b"\n"):
        d = s.recv(64)
        if not d:
            break
        got += d
    s.close()
    lat.append(time.perf_counter() - a)
took = time.perf_counter() - t0
os.kill(pid, signal.SIGTERM)
os.waitpid(pid, 0)
lat.sort()
print(json.dumps({
    "requests": n,
    "requests_per_s": round(n / took),
    "p50_ms": round(lat[n // 2] * 1e3, 3),
    "p99_ms": round(lat[min(n - 1, int(n * 0.99))] * 1e3, 3),
}))
