"""`wse infer bench`'s lines, hunt 69. Before the fixes:

- the server's text reached the terminal raw: a model id "m\\x1b[2J\\nX" cleared the screen
  from the table's title and split it in two, and so did an error message in an `error:` line;
- a URL's lone user (a token: `http://sk-SECRET@host`) was printed and saved whole; pip
  shows it as `****@`;
- the password was hidden by `str.replace` over every message: a password `4` turned
  "HTTP 404" into "HTTP ****0****" (a refusal then read as a fault, exit 1) and `e` mangled
  "All connection attempts failed";
- a 404 of GET /v1/models (an endpoint pasted as --url) and a 401 (a server that needs a key)
  were "cannot reach" with httpx's MDN link, and there was no way to give a key
  (--api-key, OPENAI_API_KEY: vLLM's bench sends it as a Bearer token);
- `--timeout-s 5e-324` was taken, then "cannot reach ...: ConnectTimeout: " with no reason;
- GET /v1/models nested past Python's JSON reader was a RecursionError traceback.
"""

from __future__ import annotations

import json
import socket

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_inference.testing import fake_openai_server

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)

MODELS = b'{"object": "list", "data": [{"id": "m"}]}'
OK = b'data: {"choices": [{"text": "a"}]}\n\ndata: {"choices": [{"text": "b"}]}\n\ndata: [DONE]\n\n'
NO_KEY = {"OPENAI_API_KEY": None}  # the tests' own environment must not give one


def _free_port() -> int:
    with socket.socket() as s:  # nothing listens on it once it is closed
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bench(url: str, out, *extra: str, n: int = 2, env: dict | None = None) -> tuple[int, str]:
    args = ["infer", "bench", "--url", url, "-n", str(n), "-c", "1", "--out", out, *extra]
    return invoke(ROOT, args, env or NO_KEY)


class _Alternating:
    """A POST reply that is `OK` and an error event in turn (some requests fail)."""

    def __init__(self, error: bytes) -> None:
        self.error, self.calls = error, 0

    def __iter__(self):
        self.calls += 1
        return iter([OK if self.calls % 2 else self.error])


# -- hole 8: the server's text escaped --------------------------------------------------------
def test_the_servers_text_cannot_drive_the_terminal(tmp_path):
    models = json.dumps({"data": [{"id": "m\x1b[2J\nX"}]}).encode()
    error = b'data: {"error": {"message": "oops\\nline two\\u001b[2J"}}\n\n'
    with fake_openai_server(models, _Alternating(error)) as url:
        code, out = _bench(url, tmp_path / "b.json", n=4)
    assert code == 0 and "\x1b" not in out, out
    assert f"m\\x1b[2J\\nX at {url}" in out  # one title line, as `fail` shows text
    assert "error: oops\\nline two\\x1b[2J" in out.splitlines()
    assert json.loads((tmp_path / "b.json").read_text())["model"] == "m\x1b[2J\nX"  # as sent


# -- holes 9 and 10: credentials in the URL ---------------------------------------------------
def test_a_lone_token_in_the_url_is_masked_as_pip_masks_it(tmp_path):
    out = tmp_path / "b.json"
    with fake_openai_server(MODELS, OK) as url:
        masked = url.replace("http://", "http://****@")
        code, text = _bench(url.replace("http://", "http://sk-SECRET123@"), out)
    assert code == 0 and "SECRET" not in text and f"m at {masked}" in text, text
    assert "SECRET" not in out.read_text() and json.loads(out.read_text())["url"] == masked
    port = _free_port()
    line = refused_in_one_line(
        ROOT, ["infer", "bench", "--url", f"http://sk-SECRET123@127.0.0.1:{port}", "-n", "1",
               "--out", out], f"cannot reach http://****@127.0.0.1:{port}: ConnectError: ",
        NO_KEY,
    )  # fmt: skip
    assert "SECRET" not in line


def test_a_password_is_masked_in_the_url_only_not_in_the_messages(tmp_path):
    error = b'{"error": {"message": "The model does not exist"}}'
    with fake_openai_server(MODELS, error, status=404) as url:
        args = ["infer", "bench", "--url", url.replace("http://", "http://u:4@"), "--model", "m",
                "-n", "2", "--out", tmp_path / "k.json"]  # fmt: skip
        line = refused_in_one_line(ROOT, args, "refused every request (HTTP 404: The model "
                                   "does not exist)", NO_KEY)  # fmt: skip
    assert "http://u:****@127.0.0.1" in line  # was: "HTTP ****0****", exit 1
    port = _free_port()
    args = ["infer", "bench", "--url", f"http://u:e@127.0.0.1:{port}", "-n", "1",
            "--out", tmp_path / "q.json"]  # fmt: skip
    refused_in_one_line(ROOT, args, "ConnectError: All connection attempts failed", NO_KEY)
    assert list(tmp_path.iterdir()) == []


# -- hole 11: 404 and 401 named, a key given --------------------------------------------------
def test_an_endpoint_given_as_url_is_a_404_with_the_base_url_to_give(tmp_path):
    with fake_openai_server(b'{"detail": "Not Found"}', OK, status=404) as url:
        args = ["infer", "bench", "--url", f"{url}/v1/completions", "--out", tmp_path / "b.json"]
        line = refused_in_one_line(ROOT, args, f"GET {url}/v1/completions/v1/models answered "
                                   f"404 Not Found", NO_KEY)  # fmt: skip
    assert line.endswith(f"; --url is the server's base URL, e.g. {url}"), line
    assert "developer.mozilla.org" not in line and not (tmp_path / "b.json").exists()


def test_a_url_with_a_query_is_refused_before_connecting(tmp_path):
    args = ["infer", "bench", "--url", "http://u:pw@127.0.0.1:9/?x=1", "--out", tmp_path / "b"]
    line = refused_in_one_line(ROOT, args, "--url 'http://u:****@127.0.0.1:9/?x=1' has a "
                               "query; give the server's base URL")  # fmt: skip
    assert "pw" not in line  # was: GET http://127.0.0.1:9?x=1/v1/models ... 404, no hint


def test_a_server_that_needs_a_key_says_how_to_give_one(tmp_path):
    unauthorized = b'{"error": {"message": "Unauthorized"}}'
    with fake_openai_server(unauthorized, unauthorized, status=401) as url:
        args = ["infer", "bench", "--url", url, "--out", tmp_path / "b.json"]
        line = refused_in_one_line(ROOT, args, f"GET {url}/v1/models answered 401 "
                                   "Unauthorized (Unauthorized)", NO_KEY)  # fmt: skip
        assert line.endswith("; give --api-key or set OPENAI_API_KEY"), line
        args += ["--model", "m", "--api-key", "sk-wrong"]
        line = refused_in_one_line(ROOT, args, "refused every request (HTTP 401: Unauthorized)")
        assert line.endswith("the server refused the key of --api-key (or OPENAI_API_KEY)")
        assert "sk-wrong" not in line


@pytest.mark.parametrize("how", ["option", "environment"])
def test_the_key_is_sent_as_a_bearer_token_and_never_printed_or_saved(tmp_path, how):
    seen: list[dict[str, str]] = []
    out = tmp_path / "b.json"
    extra, env = (["--api-key", "sk-t0ken"], NO_KEY) if how == "option" else ([], {
        "OPENAI_API_KEY": "sk-t0ken"})  # fmt: skip
    with fake_openai_server(MODELS, OK, seen=seen) as url:
        code, text = _bench(url, out, *extra, env=env)
    assert code == 0, text
    assert {h.get("authorization") for h in seen} == {"Bearer sk-t0ken"}
    assert "sk-t0ken" not in text + out.read_text()


def test_a_key_that_is_not_ascii_text_is_refused_without_showing_it(tmp_path):
    args = ["infer", "bench", "--url", "http://127.0.0.1:9", "--api-key", "sk-\u00e9\n",
            "--out", tmp_path / "b.json"]  # fmt: skip
    line = refused_in_one_line(ROOT, args, "--api-key (or OPENAI_API_KEY) holds a character "
                               "other than ASCII letters, digits and punctuation (character "
                               "3); give the key alone")  # fmt: skip
    assert "sk-" not in line
    code, text = invoke(ROOT, ["infer", "bench", "--help"], {"OPENAI_API_KEY": "sk-t0ken"})
    assert code == 0 and "--api-key" in text and "sk-t0ken" not in text


# -- holes 12, 4 and 5: the models call --------------------------------------------------------
def test_a_timeout_below_a_millisecond_is_refused_in_one_line(tmp_path):
    args = ["infer", "bench", "--url", "http://127.0.0.1:9", "--timeout-s", "5e-324",
            "--out", tmp_path / "b.json"]  # fmt: skip
    refused_in_one_line(ROOT, args, "--timeout-s must be a finite number in [0.001, 86400] "
                        "(s), got 5e-324")  # fmt: skip


@pytest.mark.parametrize(
    ("models", "message"),
    [(b'{"data": ' + b"[" * 100_000 + b"}", "did not answer OpenAI's"),  # RecursionError
     (b'{"data": "' + b"x" * (3 << 20) + b'"}', "sent more than 1,048,576 bytes")],
    ids=["nested", "past 1 MiB"],
)  # fmt: skip
def test_a_models_reply_nested_too_deep_or_too_big_is_one_line(tmp_path, models, message):
    with fake_openai_server(models, OK) as url:
        args = ["infer", "bench", "--url", url, "--out", tmp_path / "b.json"]
        refused_in_one_line(ROOT, args, f"{url} is not an OpenAI-compatible server: GET "
                            f"/v1/models {message}", NO_KEY)  # fmt: skip
    assert not (tmp_path / "b.json").exists()
