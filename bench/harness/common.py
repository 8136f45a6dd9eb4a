"""Paths and the few helpers every module uses."""
import os, shutil, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "bench", "work")
RESULTS = os.path.join(ROOT, "bench", "results")

def log(msg):
    print(msg, flush=True)

def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)

def which(tool):
    return shutil.which(tool) or f"/usr/sbin/{tool}"

def work_dir(name):
    """bench/work/NAME, created if missing."""
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    return d

def write(path, content):
    """Writes text or bytes to path; returns path."""
    with open(path, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
    return path
