"""psycopg 3 through faultd's postgres route, checked against the same PostgreSQL reached directly.

Run by faultd/tests/postgres_protocol.rs with PROXY_PORT (faultd's route) and DIRECT_PORT (the server). Each check
asserts; the script prints one line per check passed and exits non-zero at the first that fails.
"""

import os
import sys
import time

import psycopg
from psycopg import errors

PROXY = f"host=127.0.0.1 port={os.environ['PROXY_PORT']} user=postgres dbname=postgres sslmode=disable connect_timeout=5"
DIRECT = f"host=127.0.0.1 port={os.environ['DIRECT_PORT']} user=postgres dbname=postgres sslmode=disable connect_timeout=5"


def passed(name):
    print(f"ok {name}", flush=True)


def direct(query, params=None):
    with psycopg.connect(DIRECT, autocommit=True) as c:
        return c.execute(query, params).fetchall()


def expect_error(run, cls, sqlstate):
    try:
        run()
    except cls as e:
        assert e.sqlstate == sqlstate, f"{cls.__name__}: sqlstate {e.sqlstate}, expected {sqlstate}"
        return e
    raise AssertionError(f"no {cls.__name__} raised")


def untouched_queries_give_what_the_server_gives():
    queries = [
        ("SELECT id, balance FROM accounts ORDER BY id", None),
        ("SELECT balance FROM accounts WHERE id = %s", (1,)),
        ("SELECT g, md5(g::text) FROM generate_series(1, 5000) g", None),
        ("SELECT %s::text, %s::int, %s::numeric, NULL", ("héllo", 42, "3.14")),
        ("SELECT repeat('x', 3000000)", None),
    ]
    with psycopg.connect(PROXY, autocommit=True) as via, psycopg.connect(DIRECT, autocommit=True) as to:
        for q, p in queries:
            a = via.execute(q, p)
            b = to.execute(q, p)
            assert [d.name for d in a.description] == [d.name for d in b.description], q
            assert a.fetchall() == b.fetchall(), q
        for q, p in queries[:2]:
            assert via.execute(q, p, prepare=True).fetchall() == to.execute(q, p).fetchall(), q
            assert via.execute(q, p, prepare=True).fetchall() == to.execute(q, p).fetchall(), q
        # The simple query protocol, through libpq's PQexec.
        r = via.pgconn.exec_(b"SELECT id, balance FROM accounts ORDER BY id; SELECT 'two'")
        assert r.status == psycopg.pq.ExecStatus.TUPLES_OK, r.error_message
        assert r.get_value(0, 0) == b"two"
    passed("untouched queries give what the server gives")


def a_faulted_update_outside_a_transaction_raises_and_writes_nothing():
    before = direct("SELECT balance FROM accounts WHERE id = 1")
    with psycopg.connect(PROXY, autocommit=True) as c:
        e = expect_error(
            lambda: c.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (1,)),
            errors.SerializationFailure,
            "40001",
        )
        assert "could not serialize access" in str(e), str(e)
        assert e.diag.severity == "ERROR", e.diag.severity
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # Prepared (a named statement, bound again without its Parse the second time).
        for _ in range(2):
            expect_error(
                lambda: c.execute("UPDATE accounts SET balance = 1 WHERE id = %s", (1,), prepare=True),
                errors.SerializationFailure,
                "40001",
            )
        # The simple query protocol.
        r = c.pgconn.exec_(b"UPDATE accounts SET balance = 2 WHERE id = 1")
        assert r.status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert r.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"40001"
        assert c.execute("SELECT 1").fetchone() == (1,), "the connection goes on"
    assert direct("SELECT balance FROM accounts WHERE id = 1") == before, "nothing was written"
    passed("a faulted update outside a transaction raises and writes nothing")


def a_faulted_update_inside_a_transaction_aborts_it_at_the_server():
    with psycopg.connect(PROXY) as c:
        c.execute("INSERT INTO accounts VALUES (2, 5)")
        expect_error(
            lambda: c.execute("UPDATE accounts SET balance = balance - 10 WHERE id = %s", (1,)),
            errors.SerializationFailure,
            "40001",
        )
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        expect_error(lambda: c.execute("SELECT 1"), errors.InFailedSqlTransaction, "25P02")
        c.rollback()
        assert c.execute("SELECT count(*) FROM accounts WHERE id = 2").fetchone() == (0,)
        c.commit()
    assert direct("SELECT count(*) FROM accounts WHERE id = 2") == [(0,)], "the insert was rolled back"
    # COMMIT of the aborted transaction rolls it back, as after a real failure.
    with psycopg.connect(PROXY) as c:
        c.execute("INSERT INTO accounts VALUES (3, 5)")
        expect_error(lambda: c.execute("UPDATE accounts SET balance = 7"), errors.SerializationFailure, "40001")
        c.commit()
    assert direct("SELECT count(*) FROM accounts WHERE id = 3") == [(0,)], "COMMIT rolled back"
    passed("a faulted update inside a transaction aborts it at the server")


def each_sqlstate_raises_its_class():
    with psycopg.connect(PROXY, autocommit=True) as c:
        expect_error(lambda: c.execute("UPDATE deadlock SET x = 1"), errors.DeadlockDetected, "40P01")
        assert c.execute("SELECT 'every'").fetchone() == ("every",), "the first of every: 2 passes"
        expect_error(lambda: c.execute("SELECT 'every'"), errors.QueryCanceled, "57014")
    passed("each sqlstate raises its class")


def a_delay_holds_the_reply():
    with psycopg.connect(PROXY, autocommit=True) as c:
        start = time.monotonic()
        assert c.execute("SELECT 'slow'").fetchone() == ("slow",)
        took = time.monotonic() - start
        assert took >= 0.3, f"the delayed statement took {took:.3f} s"
        start = time.monotonic()
        c.execute("SELECT 'quick'")
        assert time.monotonic() - start < took
    passed("a delay holds the reply")


def terminate_loses_the_connection_mid_query():
    c = psycopg.connect(PROXY, autocommit=True)
    try:
        c.execute("SELECT 'cut'")
        raise AssertionError("no error")
    except psycopg.OperationalError as e:
        assert "server closed the connection unexpectedly" in str(e) or "consuming input failed" in str(e), str(e)
    assert c.broken
    c.close()
    passed("terminate loses the connection mid-query")


if __name__ == "__main__":
    untouched_queries_give_what_the_server_gives()
    a_faulted_update_outside_a_transaction_raises_and_writes_nothing()
    a_faulted_update_inside_a_transaction_aborts_it_at_the_server()
    each_sqlstate_raises_its_class()
    a_delay_holds_the_reply()
    terminate_loses_the_connection_mid_query()
    sys.exit(0)
