"""The client and the engine give the same keyed digests: a runtime that sends only digests (of
results and of arguments) gets exactly the decisions of one that sends the content."""

from __future__ import annotations

from stallwatch.client import EmbeddedClient
from stallwatch.engine.canonical import call_signature, derive_secret, fingerprint

KEY = "the fleet's shared fingerprint key"
# A secret in a result: letters and a dash, so that it cannot turn up by chance in the random
# hex ids and float timestamps of the events (a bare "4821" did, in 1 CI run of many).
PIN = "pin-4821"
TOOLS = [
    {"name": "search", "facts": {"path": "items", "key": "id"}, "volatile_fields": ["took_ms"]},
    {"name": "fetch"},
]


async def drive(client: EmbeddedClient, send_content: bool, sent: list[dict]) -> list:
    send, apply = client._send, client._apply

    async def spy_send(event):
        sent.append(event)
        return await send(event)

    def spy_apply(event):  # in-process, a run's events after run_started skip the transport
        sent.append(event)
        return apply(event)

    client._send, client._apply = spy_send, spy_apply
    run = await client.start_run("parity", "researcher", TOOLS)
    decisions = []
    for i in range(9):
        await run.start_round()
        page = {"items": [{"id": 1 + i % 2}], "took_ms": i}
        for tool, args, result in (
            ("search", {"q": f"w{i % 3}"}, page),
            ("fetch", {"url": "u"}, {"pin": PIN}),
        ):
            call_id, decision = await run.propose(tool, args)
            decisions.append((decision.allowed, decision.code))
            if decision.allowed:
                await run.result(call_id, tool, "ok", result, send_content=send_content)
        await run.end_round()
    decisions.append(run.stop.code if run.stop else None)
    return decisions


async def test_digests_only_and_content_give_the_same_decisions_and_state():
    plain_events, digest_events = [], []
    plain = EmbeddedClient(fingerprint_key=KEY)
    hashed = EmbeddedClient(fingerprint_key=KEY, args_digest_only=True)
    decisions = await drive(plain, True, plain_events)
    assert decisions == await drive(hashed, False, digest_events)
    assert decisions[-1] == "all_refused"
    assert (False, "duplicate_call") in await drive(EmbeddedClient(fingerprint_key=KEY), True, [])
    ours, theirs = plain.engine.runs["parity"], hashed.engine.runs["parity"]
    assert (ours.signatures, ours.fingerprints, ours.stop_code) == (
        theirs.signatures,
        theirs.fingerprints,
        theirs.stop_code,
    )
    calls = [e for e in digest_events if e["type"] == "call_proposed"]
    assert calls and all("args" not in e for e in calls)
    assert calls[0]["args_digest"] == call_signature("search", {"q": "w0"}, derive_secret(KEY)).hex()
    assert PIN not in repr(digest_events)


async def test_the_client_keys_its_fingerprints_with_the_shared_key():
    sent: list[dict] = []
    await drive(EmbeddedClient(fingerprint_key=KEY), False, sent)
    fetched = next(e for e in sent if e["type"] == "call_result" and e["tool"] == "fetch")
    assert fetched["fingerprint"] == fingerprint({"pin": PIN}, derive_secret(KEY))[0]
    assert fetched["fingerprint"] != fingerprint({"pin": PIN})[0]
