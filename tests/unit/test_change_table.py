"""The change table (``.changes``) and the catalog listings that trust it.

The catalog tests set the settle time to zero so that the table is trusted at once; each checks
that the listing really took the table path (no full scan) before checking what it saw.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_catalog import expected

import sessionledger.projections._catalog as catalog_module
from sessionledger.eventlog import FileStore, MemoryStore
from sessionledger.eventlog import _changes as changes
from sessionledger.eventlog._changes import (
    CHANGES_NAME,
    MAGIC,
    SLOTS,
    TABLE_SIZE,
    ChangeTable,
    changed_slots,
    new_table_bytes,
    slot_of,
    valid_table,
    view_of,
)
from sessionledger.eventlog.backend import LogStat, catalog_source
from sessionledger.projections import list_sessions, rebuild_catalog

ROOT = Path(__file__).resolve().parents[2]


def stamps(table: ChangeTable) -> list[int]:
    view = table.read()
    assert view is not None
    return list(memoryview(view.slots).cast("Q"))


# -- the table itself -----------------------------------------------------------------------------


def test_slots_are_stable_and_in_range() -> None:
    names = [f"k{i}.jsonl" for i in range(2000)]
    slots = [slot_of(n) for n in names]
    assert all(0 <= s < SLOTS for s in slots)
    assert slots == [slot_of(n) for n in names]
    assert len(set(slots)) > 1000  # spread, not one bucket
    code = "from eventlog._changes import slot_of; print(slot_of('k7.jsonl'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True)
    assert int(out.stdout) == slot_of("k7.jsonl")  # the same in another process


def test_changed_slots_finds_exactly_the_differing_stamps() -> None:
    old = bytearray(SLOTS * 8)
    new = bytearray(old)
    for slot in (0, 63, 64, 1000, SLOTS - 1):
        new[slot * 8 : slot * 8 + 8] = (slot + 1).to_bytes(8, "little")
    assert changed_slots(bytes(old), bytes(new)) == [0, 63, 64, 1000, SLOTS - 1]
    assert changed_slots(bytes(old), bytes(old)) == []
    assert changed_slots(b"", bytes(new)) == list(range(SLOTS))


def test_a_new_table_is_valid_and_empty() -> None:
    data = new_table_bytes(123)
    assert len(data) == TABLE_SIZE and valid_table(data)
    view = view_of(data)
    assert view.created_ns == 123 and view.membership == 0 and view.slots == bytes(SLOTS * 8)
    assert view_of(new_table_bytes(1)).ident != view.ident
    assert not valid_table(b"x" + data[1:]) and not valid_table(data[:-8])


def test_readers_make_the_table_private_and_writers_only_bump_it(tmp_path: Path) -> None:
    writer = ChangeTable(str(tmp_path))
    writer.bump(5)  # no table yet: a writer does not make one
    assert not (tmp_path / CHANGES_NAME).exists()
    reader = ChangeTable(str(tmp_path))
    first = reader.read()
    path = tmp_path / CHANGES_NAME
    assert first is not None and path.stat().st_mode & 0o777 == 0o600
    assert path.stat().st_size == TABLE_SIZE
    assert [p.name for p in tmp_path.iterdir()] == [CHANGES_NAME]  # no temporary file left
    time.sleep(changes.CHECK_INTERVAL)  # the writer looks again at its next check
    writer.bump(5, membership=True)
    after = reader.read()
    assert after is not None and after.ident == first.ident
    assert after.changed_since(first.slots) == [5]
    assert after.membership != first.membership


def test_stamps_never_repeat_across_handles(tmp_path: Path) -> None:
    a, b = ChangeTable(str(tmp_path)), ChangeTable(str(tmp_path))
    a.read()
    b.read()  # both map the table now (a writer alone would only look for it every interval)
    seen = set()
    for i in range(300):
        (a if i % 2 else b).bump(7)
        value = stamps(a)[7]
        assert value not in seen
        seen.add(value)


def test_a_forked_child_draws_other_stamps(tmp_path: Path) -> None:
    table = ChangeTable(str(tmp_path))
    table.read()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            table.bump(3)
            os.write(write_end, stamps(table)[3].to_bytes(8, "little"))
        finally:
            os._exit(0)
    os.close(write_end)
    child = int.from_bytes(os.read(read_end, 8), "little")
    os.close(read_end)
    os.waitpid(pid, 0)
    table.bump(3)
    assert stamps(table)[3] != child


def test_a_symlinked_table_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(new_table_bytes(1))
    (tmp_path / CHANGES_NAME).symlink_to(target)
    table = ChangeTable(str(tmp_path))
    assert table.read() is None
    table.bump(1)
    assert target.read_bytes() == new_table_bytes(1)[:16] + target.read_bytes()[16:]
    assert view_of(target.read_bytes()).slots == bytes(SLOTS * 8)


def test_a_corrupt_table_is_replaced_by_a_reader_only(tmp_path: Path) -> None:
    path = tmp_path / CHANGES_NAME
    path.write_bytes(b"garbage")
    writer = ChangeTable(str(tmp_path))
    writer.bump(2)
    assert path.read_bytes() == b"garbage"
    assert ChangeTable(str(tmp_path)).read() is not None
    assert valid_table(path.read_bytes())


def test_a_table_of_another_version_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / CHANGES_NAME
    other = b"SLCHG2\0\0" + bytes(100)
    path.write_bytes(other)
    assert ChangeTable(str(tmp_path)).read() is None
    assert path.read_bytes() == other and other[:8] != MAGIC


def test_a_writer_moves_to_a_new_table_after_the_old_one_is_deleted(tmp_path: Path) -> None:
    reader = ChangeTable(str(tmp_path))
    writer = ChangeTable(str(tmp_path))
    reader.read()
    writer.bump(9)  # maps the table
    os.unlink(tmp_path / CHANGES_NAME)
    fresh = reader.read()
    assert fresh is not None
    time.sleep(changes.CHECK_INTERVAL)
    writer.bump(9)  # due a check: finds its table unlinked, maps the new one, bumps there
    after = reader.read()
    assert after is not None and after.ident == fresh.ident and after.changed_since(fresh.slots)


# -- listings that trust the table ----------------------------------------------------------------


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust a table at once (the real settle time is a second)."""
    monkeypatch.setattr(changes, "SETTLE_NS", 0)


class Spy:
    """Counts full scans, directory listings and per-log stats of a file store."""

    def __init__(self, store: FileStore) -> None:
        self.scans = self.listings = 0
        self.stats: list[str] = []
        source = catalog_source(store)
        scan, names, stat = source.scan_logs, source.log_names, source.stat_log

        def scan_logs() -> list[LogStat]:
            self.scans += 1
            return scan()

        def log_names() -> list[str]:
            self.listings += 1
            return names()

        def stat_log(name: str) -> LogStat | None:
            self.stats.append(name)
            return stat(name)

        source.scan_logs = scan_logs  # type: ignore[method-assign]
        source.log_names = log_names  # type: ignore[method-assign]
        source.stat_log = stat_log  # type: ignore[method-assign]


def filled(root: Path, n: int = 6) -> FileStore:
    store = FileStore(root, durability="none")
    for i in range(n):
        with store.session(f"bot:chan:{i}") as w:
            w.append_message("user", f"hello {i}")
    return store


def trusting(store: FileStore) -> Spy:
    """List until the table is trusted; return a spy on what later listings stat."""
    for _ in range(3):
        list_sessions(store)
    spy = Spy(store)
    list_sessions(store)
    assert spy.scans == 0 and spy.stats == [] and spy.listings == 0  # nothing changed: no stat
    return spy


def run(code: str, root: Path, check: bool = True) -> int:
    head = "import sys\nfrom eventlog import FileStore\ns = FileStore(sys.argv[1], durability='none')\n"
    done = subprocess.run([sys.executable, "-c", head + code, str(root)], cwd=ROOT, check=check)
    return done.returncode


def test_a_second_process_appending_is_seen_through_the_table(
    settled: None, tmp_path: Path
) -> None:
    store = filled(tmp_path)
    spy = trusting(store)
    run(
        "with s.session('bot:chan:3') as w:\n    w.append_message('assistant', 'elsewhere')\n",
        tmp_path,
    )
    rows = {r.key: r for r in list_sessions(store)}
    assert rows["bot:chan:3"].messages == 2
    assert spy.scans == 0 and spy.listings == 0  # no full scan, no directory listing
    assert store.path_for("bot:chan:3").name in spy.stats
    assert len(spy.stats) < 6  # only the logs of the changed slot
    assert list_sessions(store) == expected(store)


def test_a_session_created_or_deleted_elsewhere_is_seen(settled: None, tmp_path: Path) -> None:
    store = filled(tmp_path)
    spy = trusting(store)
    run("with s.session('new:one:1') as w:\n    w.append_message('user', 'fresh')\n", tmp_path)
    rows = list_sessions(store)
    assert rows[0].key == "new:one:1" and rows[0].preview == "fresh"
    assert spy.scans == 0 and spy.listings == 1  # membership changed: names listed once
    run("s.delete('bot:chan:2')\n", tmp_path)
    assert "bot:chan:2" not in [r.key for r in list_sessions(store)]
    assert list_sessions(store) == expected(store)


def test_a_writer_killed_between_its_line_and_its_bump(settled: None, tmp_path: Path) -> None:
    store = filled(tmp_path)
    trusting(store)
    code = (
        "import os, sys\n"
        "from eventlog import FileStore\n"
        "s = FileStore(sys.argv[1], durability='none')\n"
        "class Dies:\n"
        "    def bump(self, slot, membership=False):\n"
        "        os._exit(9)\n"
        "w = s.session('bot:chan:1')\n"
        "print('open', flush=True)\n"
        "sys.stdin.readline()\n"
        "w._io._changes = Dies()\n"  # the line is written, then the process dies
        "w.append_message('assistant', 'unannounced')\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "open\n"
        list_sessions(store)  # sees the open's bump
        child.stdin.write("go\n")
        child.stdin.close()
        assert child.wait() == 9
    assert store.state("bot:chan:1").total_messages == 2  # the line is in the log
    # Its append never returned, and no bump announced it: a listing does not see it yet...
    assert {r.key: r for r in list_sessions(store)}["bot:chan:1"].messages == 1
    # ...until the session is next opened for writing (by any process): that open bumps.
    with FileStore(tmp_path).session("bot:chan:1"):
        pass
    assert {r.key: r for r in list_sessions(store)}["bot:chan:1"].messages == 2
    assert list_sessions(store) == expected(store)


def test_an_unannounced_change_is_seen_by_the_next_full_scan(
    settled: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = filled(tmp_path)
    trusting(store)
    path = store.path_for("bot:chan:4")
    extra = FileStore(tmp_path / "other", durability="none")
    with extra.session("bot:chan:4") as w:  # a log another tool wrote by hand, same key
        w.append_message("user", "replaced by hand")
        w.append_message("user", "twice")
    path.write_bytes(extra.read_bytes("bot:chan:4"))
    assert {r.key: r for r in list_sessions(store)}["bot:chan:4"].messages == 1  # not stat-ed
    monkeypatch.setattr(catalog_module, "FULL_SCAN_NS", 0)
    assert {r.key: r for r in list_sessions(store)}["bot:chan:4"].messages == 2
    assert list_sessions(store) == expected(store)


def test_a_missing_table_means_a_full_scan_and_a_new_table(settled: None, tmp_path: Path) -> None:
    store = filled(tmp_path)
    trusting(store)
    os.unlink(tmp_path / CHANGES_NAME)
    other = FileStore(tmp_path, durability="none")  # its writer still maps the deleted table
    with other.session("bot:chan:0") as w:
        w.append_message("user", "while the table was gone")
        spy = Spy(store)
        rows = list_sessions(store)
        assert spy.scans == 1  # an unknown table: every log is stat-ed
        assert {r.key: r for r in rows}["bot:chan:0"].messages == 2
    assert (tmp_path / CHANGES_NAME).exists()
    assert list_sessions(store) == expected(store)


def test_a_corrupt_table_means_a_full_scan(settled: None, tmp_path: Path) -> None:
    store = filled(tmp_path)
    trusting(store)
    with store.session("bot:chan:5") as w:
        w.append_message("user", "more")
    (tmp_path / CHANGES_NAME).write_bytes(b"\0" * 100)
    spy = Spy(store)
    assert list_sessions(store) == expected(store)
    assert spy.scans == 1


def test_a_store_from_before_the_table_lists_correctly(tmp_path: Path) -> None:
    store = filled(tmp_path)
    assert not (tmp_path / CHANGES_NAME).exists()  # only listings make the table
    (tmp_path / ".catalog").write_bytes(b"\x93\xb2sessionlog-catalog\x01\x90")  # an old version
    assert list_sessions(FileStore(tmp_path)) == expected(store)
    assert (tmp_path / CHANGES_NAME).exists()


def test_deleting_the_catalog_and_the_table_loses_nothing(settled: None, tmp_path: Path) -> None:
    store = filled(tmp_path)
    trusting(store)
    with store.session("bot:chan:2") as w:
        w.update_metadata(set={"title": "kept"})
    first = list_sessions(store)
    os.unlink(tmp_path / ".catalog")
    os.unlink(tmp_path / CHANGES_NAME)
    assert list_sessions(FileStore(tmp_path)) == first == expected(store)
    assert rebuild_catalog(FileStore(tmp_path)) == 6


def test_a_fresh_process_redoes_what_the_file_lags(settled: None, tmp_path: Path) -> None:
    store = filled(tmp_path)
    trusting(store)
    with store.session("bot:chan:1") as w:
        w.append_message("user", "not yet in the file")  # one change: the file is not rewritten
    assert list_sessions(store)[0].key == "bot:chan:1"
    fresh = FileStore(tmp_path)
    spy = Spy(fresh)
    rows = list_sessions(fresh)
    assert rows == list_sessions(store) == expected(store)
    assert spy.scans == 0 and store.path_for("bot:chan:1").name in spy.stats


def test_stores_without_a_table_stat_everything() -> None:
    store = MemoryStore()
    assert catalog_source(store).read_changes() is None
    with store.session("a:b:c") as w:
        w.append_message("user", "x")
    assert list_sessions(store) == expected(store)


def test_a_table_from_the_future_is_replaced(tmp_path: Path) -> None:
    later = time.time_ns() + 3600 * 1_000_000_000
    (tmp_path / CHANGES_NAME).write_bytes(new_table_bytes(later))
    view = ChangeTable(str(tmp_path)).read()
    assert view is not None and view.created_ns <= time.time_ns()


def test_every_returned_append_of_a_busy_process_is_listed(settled: None, tmp_path: Path) -> None:
    """A child appends (and creates sessions) nonstop, publishing what has returned; each
    listing must show at least what was published before it started."""
    store = filled(tmp_path, 3)
    spy = trusting(store)
    progress = tmp_path / "progress"  # not a log name: the store ignores it
    progress.write_bytes(bytes(16))
    code = (
        "import os, time\n"
        "fd = os.open(sys.argv[2], os.O_WRONLY)\n"
        "writers = [s.session(f'bot:chan:{i}') for i in range(3)]\n"
        "n = created = 0\n"
        "end = time.monotonic() + 1.5\n"
        "while time.monotonic() < end:\n"
        "    n += 1\n"
        "    writers[n % 3].append_message('user', str(n))\n"
        "    if n % 50 == 0:\n"
        "        created += 1\n"
        "        with s.session(f'made:by:{created}') as w:\n"
        "            w.append_message('user', 'x')\n"
        "    os.pwrite(fd, n.to_bytes(8, 'little') + created.to_bytes(8, 'little'), 0)\n"
    )
    head = "import sys\nfrom eventlog import FileStore\ns = FileStore(sys.argv[1], durability='none')\n"
    with subprocess.Popen(
        [sys.executable, "-c", head + code, str(tmp_path), str(progress)]
    ) as child:
        checks = 0
        while child.poll() is None or checks == 0:
            done = progress.read_bytes()
            n, created = int.from_bytes(done[:8], "little"), int.from_bytes(done[8:], "little")
            rows = {r.key: r for r in list_sessions(store)}
            # session i got appends n' <= n with n' % 3 == i, after its first message
            for i in range(3):
                returned = n // 3 if i == 0 else (n - i) // 3 + 1 if n >= i else 0
                assert rows[f"bot:chan:{i}"].messages >= 1 + returned
            assert all(f"made:by:{c}" in rows for c in range(1, created + 1))
            checks += 1
        assert child.wait() == 0
    assert checks > 5
    assert spy.scans == 0  # the whole time through the table, never a full scan
    assert list_sessions(store) == expected(store)


def test_the_settle_time_covers_a_writer_that_has_not_found_the_table(tmp_path: Path) -> None:
    writer = FileStore(tmp_path, durability="none")
    w = writer.session("a:b:c")  # looks for a table: there is none yet
    reader = FileStore(tmp_path, durability="none")
    assert list_sessions(reader)[0].messages == 0  # makes the table
    w.append_message("user", "before the writer looks again")  # stored nowhere
    assert list_sessions(reader)[0].messages == 1  # a young table: every log is stat-ed
    w.close()


def test_the_file_is_rewritten_once_its_copy_can_be_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(changes, "SETTLE_NS", 300_000_000)
    store = filled(tmp_path)
    path = tmp_path / ".catalog"
    list_sessions(store)  # makes the table and the file
    first = path.stat().st_ino
    list_sessions(store)  # a young table: a full scan, nothing changed, nothing written
    assert path.stat().st_ino == first
    time.sleep(0.35)
    list_sessions(store)  # the first full scan after the table settled writes the file...
    assert path.stat().st_ino != first
    fresh = FileStore(tmp_path)
    spy = Spy(fresh)
    assert list_sessions(fresh) == expected(store)
    assert spy.scans == 0 and spy.stats == []  # ...so a fresh process trusts it at once


def test_a_dropped_store_leaves_no_descriptor_open(tmp_path: Path) -> None:
    filled(tmp_path, 2).close()
    gc.collect()  # stores other tests dropped must not close their descriptors mid-count
    # Only descriptors into this store count: a thread of another test (a pool, a verifier) may
    # open or close its own at any moment.
    before = _fds_under(tmp_path)
    for _ in range(20):
        store = FileStore(tmp_path, durability="none")
        list_sessions(store)  # maps the table
        with store.session("bot:chan:0") as w:
            w.append_message("user", "x")
        assert _fds_under(tmp_path) > before  # the count sees this store's descriptors
        del store, w  # never closed: the mapping goes with the object
    assert _fds_under(tmp_path) == before


def _fds_under(root: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        count += target.startswith(str(root.resolve()) + os.sep)
    return count
