"""What whole-result fingerprints miss: volatile fields, item-level facts, the nudge, chat cycles."""

from __future__ import annotations

import random

from stallwatch.client import EmbeddedClient
from stallwatch.engine.canonical import without_volatile
from tests.script import RunScript

VOLATILE = {"name": "search", "volatile_fields": ["took_ms", "meta.request_id", "items.*.score"]}
FACTS = {"name": "search", "facts": {"path": "items", "key": "id"}, "volatile_fields": ["took_ms"]}


def hits(ids, round_no: int, shuffle: bool = False) -> dict:
    items = [
        {"id": i, "title": f"doc {i}", "score": random.Random(round_no * 31 + n).random()}
        for n, i in enumerate(ids)
    ]
    if shuffle:
        random.Random(round_no).shuffle(items)
    return {"took_ms": 10 + round_no, "meta": {"request_id": f"req-{round_no}"}, "items": items}


def stops(out):
    return [(x.code, x.round) for x in out.stops]


# -- volatile fields ---------------------------------------------------------------------------


def test_a_changing_lookup_time_hides_a_loop_until_the_tool_declares_it(run):
    def script(tools):
        s = RunScript(tools=tools)
        for r in range(10):
            s.round_of(("search", {"q": f"wording {r}"}, hits(["a", "b"], r)))
        return s

    assert stops(run(script([{"name": "search"}]))) == []  # every response looks new
    assert stops(run(script([VOLATILE]))) == [("no_new_facts", 6)]


def test_a_path_that_matches_nothing_changes_nothing():
    value = {"a": 1, "items": [{"id": 1}]}
    assert without_volatile(value, ("nope", "items.*.score", "a.b")) == value
    assert without_volatile(value, ("items.*.id",)) == {"a": 1, "items": [{}]}
    assert value == {"a": 1, "items": [{"id": 1}]}  # the input is not changed


def test_a_result_empty_once_volatile_fields_are_removed_is_new(run):
    s = RunScript(tools=[VOLATILE])
    for r in range(8):
        s.round_of(("search", {"q": r}, {"took_ms": r, "meta": {"request_id": r}, "items": []}))
    assert stops(run(s)) == []


def test_paging_with_volatile_fields_never_trips(run):
    s = RunScript(tools=[VOLATILE])
    for r in range(20):
        s.round_of(("search", {"q": "x", "page": r}, hits([f"p{r}"], r)))
    assert stops(run(s)) == []


# -- item-level facts --------------------------------------------------------------------------


def test_the_same_documents_in_another_order_with_other_scores_are_already_seen(run):
    s = RunScript(tools=[FACTS])
    for r in range(10):
        s.round_of(("search", {"q": f"wording {r}"}, hits(["a", "b", "c"], r, shuffle=True)))
    assert stops(run(s)) == [("no_new_facts", 6)]
    plain = RunScript(tools=[{"name": "search"}])
    plain.events = [e for e in s.events]
    plain.events[0] = {**s.events[0], "tools": [{"name": "search"}]}
    assert stops(run(plain)) == []  # whole-result fingerprints see a new result every round


def test_one_unseen_item_makes_the_result_new(run):
    s = RunScript(tools=[FACTS])
    for r in range(10):
        s.round_of(("search", {"q": r}, hits(["a", "b", f"new-{r}"], r, shuffle=True)))
    assert stops(run(s)) == []


def test_an_empty_item_list_is_new_and_a_missing_path_falls_back_to_the_whole_result(run):
    empty = RunScript(tools=[FACTS])
    for r in range(8):
        empty.round_of(("search", {"q": r}, {"took_ms": r, "items": []}))
    assert stops(run(empty)) == []
    fallback = RunScript(tools=[FACTS])
    for r in range(8):
        fallback.round_of(("search", {"q": r}, {"took_ms": r, "error": "no index"}))
    assert stops(run(fallback)) == [("no_new_facts", 6)]  # took_ms removed, the rest repeats


def test_without_a_key_items_are_identified_by_their_fingerprint(run):
    tool = {"name": "search", "facts": {"path": "data.rows"}, "volatile_fields": ["data.rows.*.seen_at"]}
    s = RunScript(tools=[tool])
    for r in range(8):
        rows = [{"v": 1, "seen_at": r}, {"v": 2, "seen_at": r}]
        random.Random(r).shuffle(rows)
        s.round_of(("search", {"q": r}, {"data": {"rows": rows}}))
    assert stops(run(s)) == [("no_new_facts", 6)]


def test_facts_are_per_tool(run):
    tools = [FACTS, {"name": "news", "facts": {"path": "items", "key": "id"}}]
    s = RunScript(tools=tools)
    s.round_of(("search", {"q": 1}, hits(["a"], 1)))
    s.round_of(("news", {"q": 1}, {"items": [{"id": "a"}]}))  # same id, other tool: new
    s.round_of(("news", {"q": 2}, {"items": [{"id": "a"}]}))
    assert run(s).engine.runs["run-1"].already_seen_streak == 1


async def test_the_client_hashes_locally_with_the_same_declarations():
    async def loop(send_content: bool) -> tuple:
        async with EmbeddedClient() as client:
            run = await client.start_run("r", "researcher", [FACTS])
            for r in range(8):
                await run.start_round()
                call_id, decision = await run.propose("search", {"q": r})
                if decision.allowed:
                    await run.result(
                        call_id, "search", "ok", hits(["a", "b"], r, shuffle=True), send_content=send_content
                    )
                await run.end_round()
            return run.stop.code, run.stop.round, len(run.nudges)

    assert await loop(False) == await loop(True) == ("no_new_facts", 6, 1)


# -- the nudge ---------------------------------------------------------------------------------


def test_a_nudge_goes_out_once_per_streak_and_changes_no_counter(run):
    s = RunScript()
    docs = {"docs": [1, 2]}
    s.round_of(("search", {"q": 0}, docs))
    for r in range(3):
        s.round_of(("search", {"q": f"a{r}"}, docs))  # streak 3: nudge
    s.round_of(("search", {"q": "fresh"}, {"docs": [3]}))  # streak resets
    for r in range(6):
        s.round_of(("search", {"q": f"b{r}"}, docs))  # streak 3: nudge again; 5: stop
    out = run(s)
    nudges = [c for c in out.commands if c.type == "nudge"]
    assert [(n.round, n.detail["already_seen_streak"]) for n in nudges] == [(4, 3), (8, 3)]
    assert "Nothing new has come back for 3 rounds" in nudges[0].reason
    assert stops(out) == [("no_new_facts", 10)]


def test_nudge_at_null_turns_it_off_and_chat_never_nudges(run):
    s = RunScript(policy={"nudge_at": None})
    for r in range(8):
        s.round_of(("search", {"q": r}, {"docs": [1]}))
    out = run(s)
    assert [c for c in out.commands if c.type == "nudge"] == [] and stops(out) == [("no_new_facts", 6)]


# -- chat cycles -------------------------------------------------------------------------------


def chat(threshold=2):
    policy = {"cycle_threshold": threshold} if threshold else {}
    return RunScript(mode="chat", tools=[{"name": "get_order"}, {"name": "get_status"}], policy=policy)


def test_a_cycle_of_two_calls_with_the_same_results_is_refused(run):
    s = chat()
    s.start_round()
    for _ in range(2):
        s.call("get_order", {"id": 7}, status="ok", result={"order": 7})
        s.call("get_status", {"id": 7}, status="ok", result={"status": "pending"})
    s.call("get_order", {"id": 7})
    s.end_round()
    out = run(s)
    assert out.codes() == [None] * 4 + ["repeated_cycle"]
    assert "`get_order` -> `get_status`" in out.verdicts[-1].reason


def test_a_poll_whose_result_changes_is_never_a_cycle(run):
    s = chat()
    s.start_round()
    for i in range(6):
        s.call("get_order", {"id": 7}, status="ok", result={"order": 7})
        s.call("get_status", {"id": 7}, status="ok", result={"status": f"step {i}"})
    s.end_round()
    assert set(run(s).codes()) == {None}


def test_cycles_of_three_and_the_default_off(run):
    def script(threshold):
        s = RunScript(
            mode="chat",
            tools=[{"name": t} for t in "abc"],
            policy={"cycle_threshold": threshold} if threshold else {},
        )
        s.start_round()
        for _ in range(2):
            for t in "abc":
                s.call(t, {}, status="ok", result={t: 1})
        s.call("a", {})  # would go round a third time
        s.end_round()
        return s

    assert run(script(3)).codes() == [None] * 7
    assert run(script(2)).codes() == [None] * 6 + ["repeated_cycle"]
    assert set(run(script(None)).codes()) == {None}


async def test_an_empty_item_list_is_new_whether_the_result_or_only_its_fingerprint_is_sent():
    async def loop(send_content: bool) -> list:
        async with EmbeddedClient() as client:
            run = await client.start_run("r", "researcher", [FACTS])
            for r in range(8):
                await run.start_round()
                call_id, _ = await run.propose("search", {"q": r})
                await run.result(
                    call_id,
                    "search",
                    "ok",
                    {"total": 0, "note": "nothing found", "items": []},
                    send_content=send_content,
                )
                await run.end_round()
            return [run.stop, client.engine.runs["r"].already_seen_streak]

    assert await loop(True) == await loop(False) == [None, 0]


def test_a_facts_key_is_a_dotted_path_like_the_facts_path(run):
    tools = [{"name": "search", "facts": {"path": "data.hits", "key": "doc.id"}}]
    s = RunScript(tools=tools)
    for r in range(8):  # the same documents, other scores and titles: already seen
        s.round_of(
            ("search", {"q": r}, {"data": {"hits": [{"doc": {"id": "a", "title": f"t{r}"}, "score": r}]}})
        )
    assert stops(run(s)) == [("no_new_facts", 6)]
    paging = RunScript(tools=tools)
    for r in range(8):
        paging.round_of(("search", {"q": r}, {"data": {"hits": [{"doc": {"id": f"p{r}"}}]}}))
    assert stops(run(paging)) == []
