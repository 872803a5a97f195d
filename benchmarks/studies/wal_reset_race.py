"""SQLite's WAL-reset race, by hand: writer processes, each with a thread running passive
checkpoints back to back; at the end every acknowledged row must be in the file.

    python benchmarks/studies/wal_reset_race.py DIR SECONDS GUARD PROCESSES

GUARD=1 holds the database's write lock (a second connection's BEGIN IMMEDIATE) around each
checkpoint and turns the writers' autocheckpoint off, as the store does on an affected library;
GUARD=0 leaves SQLite's default autocheckpoint (AC=pages overrides it; NAP=seconds between passes)."""
import multiprocessing as mp, os, sqlite3, sys, threading, time, json

def worker(path, who, seconds, guard, out):
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=%d" % int(os.environ.get("AC", "0" if guard else "1000")))
    stop = threading.Event()
    def ckpt():
        c = sqlite3.connect(path, timeout=30, isolation_level=None)
        lock = sqlite3.connect(path, timeout=0.1, isolation_level=None) if guard else None
        while not stop.is_set():
            try:
                if guard:
                    lock.execute("BEGIN IMMEDIATE")
                c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.OperationalError:
                pass
            finally:
                if guard and lock.in_transaction:
                    lock.execute("ROLLBACK")
            time.sleep(float(os.environ.get('NAP', '0.0005')))
    t = threading.Thread(target=ckpt, daemon=True); t.start()
    acked = []
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        n += 1
        try:
            db.execute("BEGIN IMMEDIATE")
            (m,) = db.execute("SELECT coalesce(max(seq),0) FROM t").fetchone()
            db.execute("INSERT INTO t VALUES (?,?,?,randomblob(600))", (m + 1, who, n))
            db.execute("COMMIT")
            acked.append((m + 1, n))
        except sqlite3.Error as e:
            if db.in_transaction: db.execute("ROLLBACK")
            if "UNIQUE" in str(e) or "malformed" in str(e):
                acked.append(("error", str(e)))
    stop.set(); t.join()
    json.dump(acked, open(out, "w"))

if __name__ == "__main__":
    d, seconds, guard, procs = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "r.db")
    for f in (path, path + "-wal", path + "-shm"):
        if os.path.exists(f): os.remove(f)
    db = sqlite3.connect(path, isolation_level=None); db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(seq INTEGER PRIMARY KEY, who INT, n INT, pad BLOB)")
    ps = [mp.Process(target=worker, args=(path, w, seconds, guard, os.path.join(d, f"a{w}.json"))) for w in range(procs)]
    for p in ps: p.start()
    for p in ps: p.join()
    rows = {seq: (who, n) for seq, who, n in db.execute("SELECT seq, who, n FROM t")}
    total = lost = errors = 0
    for w in range(procs):
        for item in json.load(open(os.path.join(d, f"a{w}.json"))):
            if item[0] == "error": errors += 1; continue
            total += 1
            if rows.get(item[0]) != (w, item[1]): lost += 1
    print(f"guard={guard} procs={procs} acked={total} lost_or_overwritten={lost} errors={errors} integrity={db.execute('PRAGMA integrity_check').fetchone()[0]}")
