"""lm-eval's `local-completions` loglikelihood path end to end against stage 07's server
(issue 30), on the multiple-choice task 07_serving/tests/lm_eval_stdlib.py builds, limited to
3 questions, the server in this process over a small random GPT (the answers' accuracy means
nothing here; that lm-eval's requests, echo + logprobs, /tokenizer_info, /tokenize and
/detokenize, are answered so that it scores the task does). Skipped where lm-eval is not
installed: it is not one of the course's dependencies (07_serving/README.md,
'Log-probabilities': how to install it beside the course, and the run against SmolLM2)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("_stage07_lm_eval_stdlib",
                                               ROOT / "07_serving" / "tests" / "lm_eval_stdlib.py")
task = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(task)


@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                    reason="lm-eval is not installed (07_serving/README.md, 'Log-probabilities': how to install it)")
def test_lm_eval_loglikelihood_runs_against_the_server(tmp_path):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from solutions.gpt import random_gpt
    from solutions.server import ServerConfig, make_engine, serve_in_thread

    task.build(tmp_path)
    engine = make_engine(random_gpt(128), max_batch_size=8, num_blocks=64)
    with serve_in_thread(engine, None, ServerConfig()) as server:
        # the model's context is 128 byte tokens: lm-eval keeps each request's last 120
        args = f"model=course-gpt,base_url={server.url}/v1/completions,tokenizer_backend=remote," \
               "num_concurrent=1,max_retries=1,max_length=120"
        out = simple_evaluate(model="local-completions", model_args=args, tasks=[task.TASK],
                              task_manager=TaskManager(include_path=str(tmp_path)), limit=3, batch_size=4)
    acc = out["results"][task.TASK]["acc,none"]
    assert 0 <= acc <= 1, f"lm-eval must score the task through the server's log-probabilities, got {out['results']}"
