"""What an uncached tasks/get costs Redis, by the parts of its read (scripts/perf-read-cost).

Writes a finished task's record on the Redis at PORT, makes each variant's requests (RESP
bytes), loads the scripts and functions they call, then runs ROUNDS interleaved rounds (the
order rotating) of REQUESTS requests each through resp_blast, reading Redis's CPU from
/proc/<pid>/stat around each run. MUX=m sends m requests at once on one connection (as the
gateway's multiplexed connection does under load); MUX=1 has CONNS connections with one request
each in flight (redis-benchmark's way), where every request is a read and a write system call.
Usage: read_cost.py PORT REDIS_PID RESP_BLAST SENT_READ_TASK OLD_READ_TASK PRELUDE
"""
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

port, pid, blast, sent_path, old_path, prelude_path = sys.argv[1:7]
ROUNDS = int(os.environ.get("ROUNDS", "5"))
MUX = int(os.environ.get("MUX", "32"))
CONNS = int(os.environ.get("CONNS", "32"))
REQUESTS = int(os.environ.get("REQUESTS", "192000"))
ONLY = [v for v in os.environ.get("VARIANTS", "").split(",") if v]
out = tempfile.mkdtemp(prefix="read-cost.")


def cli(*args, stdin=None):
    cmd = ["redis-cli", "-p", port] + (["-x"] if stdin is not None else []) + list(args)
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout.strip()


# A finished noop task, as the store writes it (the fields of a real one, read back).
record = "load:{s00}:task:tsk_00c0ffee0123456789abcdef0123456789"
K = [record, record + ":in", record + ":out"]
U = [k + "x" for k in K]  # an unknown task's keys
OWNER = ["default", "anonymous"]
OTHER = ["default", "someone-else"]
cli("DEL", record)
cli("HSET", record, "tenant", "default", "principal", "anonymous", "tool", "noop", "args", "{}", "status", "completed",
    "created", "1796489207069", "updated", "1796489207076", "ttl", "300000", "poll", "20", "ver", "2",
    "fence", "1796489207071", "caps", "{}", "pool", "default", "capx", "1", "finisher", "worker-7756-e757",
    "result", '{"content":[{"text":"ok","type":"text"}],"isError":false}')
FIELDS = ["tenant", "principal", "status", "msg", "created", "updated", "ttl", "poll", "result", "error", "ver"]
prelude = open(prelude_path).read()
sent = open(sent_path).read()
old = prelude + open(old_path).read()


def load(text):
    sha = cli("SCRIPT", "LOAD", text)
    assert sha == hashlib.sha1(text.encode()).hexdigest()
    return sha


def function(name, text):
    """`text` (a script's: definitions, then a body from `local rcall`) as a function."""
    defs, body = text.split("local rcall = redis.call", 1)
    return (f"local function {name}(KEYS, ARGV)\nlocal rcall = redis.call{body}\nend\n"
            f"redis.register_function{{function_name='{name}', callback={name}, flags={{'no-writes'}}}}\n", defs)


old_sha, sent_sha = load(old), load(sent)
# The script before with parts taken out, to see what each costs.
OLD_LAST = "return {REPLY.OK, read_outcomes(rcall('HMGET', KEYS[1], unpack(names)), names, KEYS[3]), rcall('HGETALL', KEYS[2])}"
assert OLD_LAST in old
parts_sha = {
    "owner": load(old.replace(OLD_LAST, "return {REPLY.NOT_FOUND}")),
    "inputs": load(old.replace(OLD_LAST, OLD_LAST.replace("rcall('HGETALL', KEYS[2])", "{}"))),
    "outcome": load(old.replace(OLD_LAST, "return {REPLY.OK, rcall('HMGET', KEYS[1], unpack(names)), rcall('HGETALL', KEYS[2])}")),
    "reply": load(old.replace(OLD_LAST, "rcall('HMGET', KEYS[1], unpack(names))\nrcall('HGETALL', KEYS[2])\nreturn {REPLY.OK}")),
}
f_sent, defs_sent = function("tg_read_task", sent)
f_old, defs_old = function("tg_read_task_old", old)
# One library per function: each one's definitions run once, at FUNCTION LOAD.
cli("FUNCTION", "LOAD", "REPLACE", stdin="#!lua name=tg_read_cost\n" + defs_sent + f_sent)
cli("FUNCTION", "LOAD", "REPLACE", stdin="#!lua name=tg_read_cost_old\n" + defs_old + f_old)
empty_sha = load("return {-1}")
prelude_sha = load(prelude + "return {-1}")


def resp(*cmds):
    data = b""
    for c in cmds:
        c = [x.encode() for x in c]
        data += b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in c)
    return data


OLD_ARGS = FIELDS  # the script before took the fields as arguments
VARIANTS = {
    "script before (whole prelude, fields as arguments)": [(resp(["EVALSHA", old_sha, "3", *K, *OWNER, *OLD_ARGS]), 1)],
    "script before, unknown id": [(resp(["EVALSHA", old_sha, "3", *U, *OWNER, *OLD_ARGS]), 1)],
    "script before, foreign id": [(resp(["EVALSHA", old_sha, "3", *K, *OTHER, *OLD_ARGS]), 1)],
    "script before, owner check alone (its HMGET, then return)": [(resp(["EVALSHA", parts_sha["owner"], "3", *K, *OWNER, *OLD_ARGS]), 1)],
    "script before, without the inputs read": [(resp(["EVALSHA", parts_sha["inputs"], "3", *K, *OWNER, *OLD_ARGS]), 1)],
    "script before, without the outcome decoding": [(resp(["EVALSHA", parts_sha["outcome"], "3", *K, *OWNER, *OLD_ARGS]), 1)],
    "script before, every read but a one-element reply": [(resp(["EVALSHA", parts_sha["reply"], "3", *K, *OWNER, *OLD_ARGS]), 1)],
    "script now (prelude parts it uses, fields named in it)": [(resp(["EVALSHA", sent_sha, "3", *K, *OWNER]), 1)],
    "script now, unknown id": [(resp(["EVALSHA", sent_sha, "3", *U, *OWNER]), 1)],
    "script now, foreign id": [(resp(["EVALSHA", sent_sha, "3", *K, *OTHER]), 1)],
    "function, script before's logic (FCALL)": [(resp(["FCALL", "tg_read_task_old", "3", *K, *OWNER, *OLD_ARGS]), 1)],
    "function, script now's logic (FCALL)": [(resp(["FCALL", "tg_read_task", "3", *K, *OWNER]), 1)],
    "function, script now's logic (FCALL_RO)": [(resp(["FCALL_RO", "tg_read_task", "3", *K, *OWNER]), 1)],
    "empty script (EVALSHA of return {-1})": [(resp(["EVALSHA", empty_sha, "0"]), 1)],
    "whole prelude, then return {-1}": [(resp(["EVALSHA", prelude_sha, "0"]), 1)],
    "two round trips: HMGET owner; MULTI HMGET fields, HGETALL inputs, EXEC": [
        (resp(["HMGET", K[0], "tenant", "principal"]), 1),
        (resp(["MULTI"], ["HMGET", K[0], *FIELDS], ["HGETALL", K[1]], ["EXEC"]), 4)],
    "two round trips, unknown or foreign id (HMGET owner alone)": [(resp(["HMGET", U[0], "tenant", "principal"]), 1)],
    "HGETALL record (no owner check, no inputs)": [(resp(["HGETALL", K[0]]), 1)],
    "HMGET of the 11 fields": [(resp(["HMGET", K[0], *FIELDS]), 1)],
    "MULTI HGETALL record, HGETALL inputs, EXEC": [(resp(["MULTI"], ["HGETALL", K[0]], ["HGETALL", K[1]], ["EXEC"]), 4)],
}
names = [n for n in VARIANTS if not ONLY or any(o in n for o in ONLY)]
files = {}
for i, n in enumerate(names):
    paths, counts = [], []
    for j, (data, replies) in enumerate(VARIANTS[n]):
        path = f"{out}/{i}-{j}.resp"
        open(path, "wb").write(data * MUX)
        paths.append(path)
        counts.append(str(replies * MUX))
    files[n] = (",".join(paths), ",".join(counts))


def ticks():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
results = {n: [] for n in names}
loads = []
for r in range(ROUNDS):
    order = names[r % len(names):] + names[:r % len(names)]
    loads.append(open("/proc/loadavg").read().split()[0])
    for n in order:
        paths, counts = files[n]
        conns = 1 if MUX > 1 else CONNS
        t0 = ticks()
        rate = subprocess.run([blast, port, str(conns), str(REQUESTS // MUX), counts, paths],
                              capture_output=True, text=True, check=True).stdout
        t1 = ticks()
        results[n].append(((t1 - t0) * tick_us / REQUESTS, float(rate) * MUX))
    print(f"round {r + 1} of {ROUNDS} done (load {loads[-1]})", file=sys.stderr, flush=True)
json.dump(results, open(f"{out}/results.json", "w"))


def cell(xs, digits=2):
    return f"**{statistics.median(xs):.{digits}f}** ({min(xs):.{digits}f}–{max(xs):.{digits}f})"


mode = f"{MUX} requests at once on one connection" if MUX > 1 else f"{CONNS} connections, one request each in flight"
print(f"{ROUNDS} interleaved rounds of {REQUESTS:,} reads, {mode}; 1-min load at each round: {' '.join(loads)}")
print()
print("| read | Redis CPU µs per read | reads/s |")
print("|---|---|---|")
for n in names:
    print(f"| {n} | {cell([x[0] for x in results[n]])} | {statistics.median([x[1] for x in results[n]]):,.0f} |")
