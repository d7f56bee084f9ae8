"""The mock LLM server of the paper-scale rehearsal in a process of its own (its CPU is not the
workbench's): the project's ``saber_lib.llm.mock_server`` answering with a stage's answer function
(``answer(fail_rate) -> (prompt -> reply)``, given by the stage that starts it)."""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.llm.mock_server import MockChatServer  # noqa: E402


def _serve(limit: int, latency: float, fail_rate: float, conn, answer) -> None:
    srv = MockChatServer(latency_s=latency, limit=limit, answer_fn=answer(fail_rate), count_prompts=False)
    conn.send(srv.url)
    c0 = time.process_time()
    conn.recv()
    conn.send(time.process_time() - c0)
    srv.stop()


def start_server(o: dict, kind: str, answer):
    """The mock server answering with ``answer`` in a forked process: (process, pipe, backend config)."""
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=_serve, args=(o["concurrency"], o["latency"], o["fail_rate"], child,
                                                                answer), daemon=True)
    proc.start()
    url = parent.recv()
    cfg = {"backend": "openai", "model": f"bench/mock-{kind}", "base_urls": [url], "api_key_env": "SABER_NO_KEY",
           "max_concurrency": o["concurrency"], "server_concurrency": o["concurrency"], "server_retry_s": 30.0,
           "timeout_s": 600.0, "max_retries": 2, "retry_backoff_s": 0.1, "temperature": 1.0, "max_tokens": 16384,
           "reasoning_effort": "high", "cache_flush_every": 64}
    return proc, parent, cfg


def stop_server(proc, parent) -> float:
    """Stop the server; returns the CPU seconds its process spent serving."""
    parent.send("stop")
    cpu = parent.recv()
    proc.join(5)
    return cpu
