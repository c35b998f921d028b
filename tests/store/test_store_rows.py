"""The store's sample rows round-trip every field (empty JSON columns take a fast path both ways), and building
many rows pauses the cyclic collector only while it builds them."""
from __future__ import annotations

import gc

from evalsuite.store.bulk import gc_paused
from evalsuite.store.records import SampleResult
from evalsuite.store.sqlite import Store


def test_every_field_round_trips_empty_or_not(tmp_path):
    full = SampleResult("w4", "json", "3", "s1", "h1", "out", 0.5, extracted="x", reason="r",
                        metadata={"context_len": 2048, "depth": 0.5}, prompt="p", n_tokens=7, ttft_s=0.1, itl_s=0.02,
                        metrics={"field_accuracy": 0.75, "valid": True}, outputs=("a", "b"), token_ids=(1, 2, 3),
                        stop="eos", decode="verified")
    bare = SampleResult("bf16", "json", "3", "s2", "h2", "", 1.0)
    odd = SampleResult("bf16", "json", "3", "s3", "h3", "{}", 0.0, metadata={"k": []}, metrics={"m": {}},
                       outputs=("[]", "{}"))  # texts that look like the empty columns stay texts
    store = Store.create(tmp_path / "run", {})
    store.put_samples([full, bare, odd])
    got = {r.sample_id: r for r in store.samples()}
    assert got == {"s1": full, "s2": bare, "s3": odd}
    assert got["s2"].metadata is not got["s2"].metrics  # fresh empty containers, never one shared object
    assert store.conn.execute("SELECT metadata, metrics, outputs, token_ids FROM samples WHERE sample_id='s2'"
                              ).fetchone() == ("{}", "{}", "[]", "[]")
    store.close()


def test_the_collector_is_paused_inside_and_restored_after():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: the outer pause stands
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # found off, left off
    finally:
        gc.enable()
