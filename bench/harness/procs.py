"""Server processes: ports, CPU pinning, and each process tree's CPU time and memory."""
import os, signal, socket, subprocess, time

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port

def wait_port(port, proc, what):
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited early with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"{what} did not listen on {port}")

def cpu_layout():
    """(the proxies' core, the load generator's and upstreams' cores)."""
    n = os.cpu_count() or 1
    if n >= 2:
        return "0", ",".join(str(c) for c in range(1, n))
    return "0", "0"

def process_tree(root):
    """root's pid and its descendants' (each process's main thread's children)."""
    pids, frontier = [root], [root]
    while frontier:
        parent = frontier.pop()
        try:
            kids = open(f"/proc/{parent}/task/{parent}/children").read().split()
        except OSError:
            kids = []
        for k in kids:
            pids.append(int(k))
            frontier.append(int(k))
    return pids

def tree_cpu_seconds(root):
    """User + system CPU seconds of root's process tree."""
    total, tick = 0, os.sysconf("SC_CLK_TCK")
    for pid in process_tree(root):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            # utime + stime, and cutime + cstime: the time of children that exited and
            # were reaped (nginx's old workers after a reload).
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        except OSError:
            pass
    return total / tick

class Proc:
    """A server process pinned to CPUs; measures CPU time and peak RSS of it and its children."""
    def __init__(self, name, cmd, port, cpus):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(["taskset", "-c", cpus] + cmd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        if port is not None:  # UDP servers have no port to connect to
            wait_port(port, self.proc, name)

    def pids(self):
        return process_tree(self.proc.pid)

    def cpu_seconds(self):
        return tree_cpu_seconds(self.proc.pid)

    def status_kb(self, field):
        """A /proc/PID/status memory field (VmRSS, VmHWM), summed over the process tree, in KB."""
        kb = 0
        for pid in self.pids():
            try:
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith(field + ":"):
                        kb += int(line.split()[1])
            except OSError:
                pass
        return kb

    def peak_rss_mb(self):
        return self.status_kb("VmHWM") / 1024

    def rss_kb(self):
        return self.status_kb("VmRSS")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

class Procs(list):
    """The processes a scenario started, stopped in the order they started when its `with`
    block ends, however it ends."""
    def add(self, proc):
        self.append(proc)
        return proc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self:
            p.stop()
