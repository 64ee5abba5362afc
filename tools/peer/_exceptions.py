"""Tests that fail only with our adapter because they test private storage internals.

Each entry names a test (``classname::name`` as in JUnit reports) and why it cannot pass with
any session that keeps the framework's public behaviour but not its private storage. The
harness reports these apart from real failures; docs/adapters.md lists them too.
"""

from __future__ import annotations

_SQL = "opens the SQLite file with sqlite3 (rows, row ids, triggers or dropped tables)"
_CONN = "reaches into SQLiteSession's private connection pool (_connections, _connections_lock)"
_INSERT = "patches SQLiteSession's private _insert_items"
_CORRUPT = "writes corrupt rows through SQLiteSession's private _locked_connection"

_AGENTS_CASES = {
    "tests.extensions.memory.test_encrypt_session": {
        "test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations[append]": _SQL,
        "test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations[clear]": _SQL,
        "test_encrypted_pop_wrong_key_preserves_row_identity": _SQL,
    },
    "tests.memory.test_compaction_suffix": {
        "test_cancelled_suffix_transaction_settles_before_newer_append[sqlite]": _INSERT,
        "test_failed_encrypted_suffix_transaction_preserves_original_tokens[sqlite-False]": _SQL,
        "test_failed_encrypted_suffix_transaction_preserves_original_tokens[sqlite-True]": _SQL,
        "test_suffix_transaction_rolls_back_failed_insert[sqlite]": _SQL,
    },
    "tests.memory.test_openai_responses_compaction_session.TestOpenAIResponsesCompactionSession": {
        "test_settled_clear_failure_invalidates_response_chain[cancelled]": _CONN,
        "test_settled_clear_failure_invalidates_response_chain[error]": _CONN,
        "test_settled_pop_failure_invalidates_response_chain[cancelled]": _CONN,
        "test_settled_pop_failure_invalidates_response_chain[error]": _CONN,
    },
    "tests.memory.test_session": {
        "test_sqlite_session_close_closes_worker_thread_connections": _CONN,
        "test_sqlite_session_close_retries_quarantined_connection": _CONN,
        "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _CONN,
        "test_sqlite_session_keeps_connections_of_live_worker_threads": _CONN,
        "test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONN,
        "test_sqlite_session_rollback_failure_evicts_connection": _CONN,
        "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome[add]": _CONN,
        "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome[clear]": _CONN,
        "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome[pop]": _CONN,
        "test_sqlite_session_failed_add_items_releases_write_lock": (
            "probes the SQLite write lock with sqlite3; it also expects json's TypeError for a "
            "non-JSON item, where ours raises InvalidEventError (a ValueError) and writes nothing"
        ),
        "test_sqlite_session_failed_clear_session_rolls_back": _SQL,
        "test_sqlite_session_failed_pop_item_releases_write_lock": _SQL,
        "test_sqlite_session_file_lock_is_shared_across_instances": (
            "checks SQLiteSession's private class-level _file_locks table"
        ),
        "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
        "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
        "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
        "test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    },
    "tests.test_run_impl_resume_paths": {
        f"test_handoff_resume_after_cancelled_compaction_commits[{mode}]": _INSERT
        for mode in ("run-json", "run-live", "streamed-json", "streamed-live")
    },
}

_NANOBOT_CASES = {
    "tests.agent.test_session_atomic.TestAtomicSave": {
        "test_tmp_file_cleaned_up_on_write_failure": (
            "expects nanobot's own <stem>.jsonl.tmp to be removed by a save that fails inside "
            "nanobot's json.dumps (patched); ours neither rewrites files nor calls json.dumps"
        ),
    },
    "tests.session.test_session_fsync.TestSaveFsync": {
        "test_save_with_fsync_calls_fsync": (
            "counts os.fsync calls (file + directory on every save); ours syncs the log and the "
            "directory only when the log file is new"
        ),
    },
    "tests.session.test_session_fsync.TestFlushAll": {
        "test_flush_all_uses_fsync": "counts os.fsync calls (as above)",
    },
}

EXCEPTIONS: dict[str, dict[str, str]] = {
    name: {f"{where}::{test}": why for where, tests in cases.items() for test, why in tests.items()}
    for name, cases in (("agents", _AGENTS_CASES), ("nanobot", _NANOBOT_CASES))
}
