"""A loopback model server speaking the OpenAI chat-completions protocol.

``ChatCompletionsServer`` answers ``POST /v1/chat/completions`` with whatever
its handler returns as a ``Reply``; tests script it, and the embedded default
runs it with ``demo_policy`` so the real gateway client is always exercised,
offline and deterministically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from singularity.demo_judge import is_judge_request, judge_answer
from singularity.money import money_str

log = logging.getLogger(__name__)


@dataclass
class Reply:
    """What the server answers to one chat-completions request."""

    status: int = 200
    content: str | None = None
    #: (name, arguments) pairs; a dict is sent as JSON text, a str is sent as-is.
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    #: The usage block to send; computed from the text sizes when None.
    usage: dict[str, Any] | None = None
    #: Leave the usage block out entirely.
    omit_usage: bool = False
    delay_s: float = 0.0
    #: Bytes sent instead of a rendered body (malformed replies).
    raw_body: bytes | None = None
    error_message: str = "demo model error"
    error_type: str = "server_error"
    error_code: str | None = None


Handler = Callable[[dict[str, Any], dict[str, str]], Reply]


def _text_of(content: object) -> str:
    """Return the text of a message content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _tokens(chars: int) -> int:
    return (chars + 3) // 4


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Return about one token per four characters of the messages' text and tool-call arguments."""
    chars = 0
    for message in messages:
        chars += len(_text_of(message.get("content")))
        for call in message.get("tool_calls") or []:
            chars += len(str(call.get("function", {}).get("arguments", "")))
    return _tokens(chars)


def _arguments_text(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def render_completion(reply: Reply, request_json: dict[str, Any]) -> dict[str, Any]:
    """Return the chat-completion JSON object for a successful reply."""
    calls: list[dict[str, Any]] = []
    for index, (name, arguments) in enumerate(reply.tool_calls):
        text = _arguments_text(arguments)
        call_id = "call_" + hashlib.sha256(f"{index}:{name}:{text}".encode()).hexdigest()[:16]
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": text}})
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": "chatcmpl-demo-" + hashlib.sha256(json.dumps(request_json, sort_keys=True).encode()).hexdigest()[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request_json.get("model", "demo-model"),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
    }
    if not reply.omit_usage:
        usage = reply.usage
        if usage is None:
            prompt = estimate_prompt_tokens(request_json.get("messages") or [])
            completion = _tokens(len(reply.content or "") + sum(len(c["function"]["arguments"]) for c in calls))
            usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        body["usage"] = usage
    return body


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes; without this, Nagle and delayed ACKs add ~40 ms a call.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("demo model: " + format, *args)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_error_json(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        body = {"error": {"message": message, "type": kind, "code": code}}
        self._send(status, json.dumps(body).encode())

    def do_GET(self) -> None:
        if self.path.split("?")[0].rstrip("/") != "/v1/models":
            self._send_error_json(404, f"no route {self.path}", "invalid_request_error")
            return
        models = [
            {"id": name, "object": "model", "created": 0, "owned_by": "singularity"}
            for name in self.server.owner.list_models()
        ]
        self._send(200, json.dumps({"object": "list", "data": models}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
            self._send_error_json(404, f"no route {self.path}", "invalid_request_error")
            return
        try:
            request_json = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._send_error_json(400, f"request body is not JSON: {exc}", "invalid_request_error")
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            reply = self.server.owner.respond(request_json, headers, raw)
        except Exception as exc:  # noqa: BLE001 - a handler bug becomes a 500 the client sees, and is logged
            log.exception("demo model handler failed")
            self._send_error_json(500, f"handler failed: {exc!r}", "server_error")
            return
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.raw_body is not None:
            self._send(reply.status, reply.raw_body)
        elif reply.status != 200:
            self._send_error_json(reply.status, reply.error_message, reply.error_type, reply.error_code)
        else:
            self._send(200, json.dumps(render_completion(reply, request_json)).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ChatCompletionsServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Usually a client that gave up (timed out) before a delayed reply: expected, so not on stderr.
        log.debug("demo model: error serving %s", client_address, exc_info=True)


class ChatCompletionsServer:
    """A chat-completions server on 127.0.0.1 answering each request with ``handler``'s ``Reply``."""

    def __init__(self, handler: Handler | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.handler = handler
        self._host = host
        self._port = port
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def list_models(self) -> list[str]:
        """The model names ``GET /v1/models`` lists; subclasses may override."""
        return ["demo-model"]

    def respond(self, request_json: dict[str, Any], headers: dict[str, str], body: bytes) -> Reply:
        """Return the reply to one request (``body`` is the raw request bytes); subclasses may override."""
        if self.handler is None:
            raise RuntimeError("the chat-completions server has no handler")
        return self.handler(request_json, headers)

    def start(self) -> Self:
        """Bind, serve in a daemon thread, and return self."""
        if self._httpd is not None:
            return self
        httpd = _Server((self._host, self._port), _RequestHandler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            # A short poll keeps stop() fast; the default 0.5 s adds up across many tests.
            kwargs={"poll_interval": 0.05},
            name="chat-completions-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the chat-completions server is not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """Return the OpenAI base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self.port}/v1"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- The demo policy --------------------------------------------------------


def example_for_schema(schema: object, seed: int = 0) -> Any:
    """Return a small value valid for a simple JSON schema (strings ``demo-note-<seed>``, numbers 1, true)."""
    if not isinstance(schema, dict):
        return f"demo-note-{seed}"
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_for_schema(schema[key][0], seed)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required", list(properties))
        return {name: example_for_schema(properties.get(name, {}), seed) for name in required}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        if schema.get("maxItems") == 0:
            count = 0
        return [example_for_schema(schema.get("items", {}), seed) for _ in range(count)]
    if kind in ("integer", "number"):
        value = 1
        if "minimum" in schema:
            value = max(value, schema["minimum"])
        if "maximum" in schema:
            value = min(value, schema["maximum"])
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return f"demo-note-{seed}"


def _offered_tools(request_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the offered function tools as name → parameters schema."""
    tools: dict[str, dict[str, Any]] = {}
    for tool in request_json.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools[function["name"]] = function.get("parameters") or {}
    return tools


# --- The classifier skill ----------------------------------------------------

_RULES_HEADING = re.compile(r"^##\s+Rules\s*$", re.MULTILINE)
_NEXT_HEADING = re.compile(r"^#{1,6}\s", re.MULTILINE)
_RULE_LINE = re.compile(r"^\s*[-*]\s+(?P<keywords>.+?)\s*(?:->|→)\s*(?P<label>\S(?:.*\S)?)\s*$")


@dataclass(frozen=True)
class Rules:
    """Keyword rules read from a ``## Rules`` section: (keywords, label) in order, and the fallback label."""

    rules: tuple[tuple[tuple[str, ...], str], ...]
    otherwise: str


def parse_rules(text: str) -> Rules | None:
    """Return the rules of the first ``## Rules`` section in ``text``; None without one or without an ``otherwise``.

    A rule is a list item ``- kw1, kw2 -> label`` (or ``→``); ``- otherwise -> label``
    names the label when no rule matches. Other lines of the section are ignored.
    """
    heading = _RULES_HEADING.search(text)
    if heading is None:
        return None
    section = text[heading.end() :]
    following = _NEXT_HEADING.search(section)
    if following is not None:
        section = section[: following.start()]
    rules: list[tuple[tuple[str, ...], str]] = []
    otherwise: str | None = None
    for line in section.splitlines():
        match = _RULE_LINE.match(line)
        if match is None:
            continue
        keywords = tuple(k.strip() for k in match["keywords"].split(",") if k.strip())
        label = match["label"]
        if keywords == ("otherwise",):
            otherwise = label
        elif keywords:
            rules.append((keywords, label))
    if otherwise is None:
        return None
    return Rules(rules=tuple(rules), otherwise=otherwise)


def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    # A whole word or phrase: no word character may touch either end, and any
    # run of spaces inside a phrase matches any run of whitespace.
    words = r"\s+".join(re.escape(word) for word in keyword.split())
    return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)


def classify(rules: Rules, text: str) -> str:
    """Return the label of the first rule with a keyword in ``text``, else the ``otherwise`` label.

    Keywords match case-insensitively as whole words or phrases: ``crash``
    matches "The app will CRASH." but not "crashes" — a rule that should
    catch "crashes" has to say so, which is exactly what a proposer can add.
    """
    for keywords, label in rules.rules:
        if any(_keyword_pattern(keyword).search(text) for keyword in keywords):
            return label
    return rules.otherwise


def _task_text(content: object) -> str:
    """Return the text to classify from a user message: its JSON object's public string values, else the text.

    A runtime sends a run's input as a JSON object, alone or after a lead-in
    ("Input:\n{...}"); then only the object's string values are read, so the
    wrapping words never match a rule, and keys starting with ``_`` (labels
    for grading, such as a ticket's ``_expected``) are never read.
    """
    text = _text_of(content)
    start = text.find("{")
    if start < 0:
        return text
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return text
    if not isinstance(data, dict):
        return text
    return "\n".join(v for k, v in data.items() if isinstance(v, str) and not str(k).startswith("_"))


def _classifier_reply(messages: list[Any], tools: dict[str, dict[str, Any]]) -> Reply | None:
    """Return the label reply when a system message holds ``## Rules`` and the model is asked to answer; else None."""
    system = "\n".join(
        _text_of(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "system"
    )
    rules = parse_rules(system)
    if rules is None:
        return None
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if tools and last.get("role") != "user":
        return None
    user = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None)
    if user is None:
        return None
    return Reply(content=classify(rules, _task_text(user.get("content"))))


# --- The demo being -----------------------------------------------------------

_FRAMING = re.compile(r"^Begin autonomous cycle (?P<cycle>\d+)\.")
_EARNED = re.compile(r"Earned: (?P<earned>-?[0-9]+(?:\.[0-9]+)?) USD")
_MEMORIES = re.compile(r"^Your memories:\n(?P<json>\{.*\})\s*$", re.MULTILINE | re.DOTALL)
#: Tools the demo never picks by hash: they would fill the mind with placeholder text (a model named
#: "demo-note-197", a prompt, rules), create beings, or touch money.
_NOT_AT_RANDOM = frozenset(
    {
        "self__switch_model",
        "self__set_prompt",
        "self__add_rule",
        "self__add_learning",
        "self__spawn_child",
        "self__forget",
    }
)
_MONEY_PREFIXES = ("finance__", "trading__")
PLAN = (
    "Check finance__check_sales once a cycle: only revenue a finance tool reports counts. "
    "Remember each sale; when there is none, end the cycle at once to spend little."
)
PLAN_WITHOUT_FINANCE = "No finance tools are configured, so nothing can earn: end each cycle at once to spend little."


def _memories(messages: list[Any]) -> dict[str, Any]:
    """Return the memories the system message shows (``Your memories:`` and their JSON), or {}."""
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "system":
            match = _MEMORIES.search(_text_of(message.get("content")))
            if match:
                try:
                    found = json.loads(match["json"])
                except ValueError:
                    return {}
                return found if isinstance(found, dict) else {}
    return {}


def _find_key(value: Any, key: str) -> Any:
    """Return the first value under ``key`` in a JSON value, depth-first in document order; None when absent."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        items: list[Any] = list(value.values())
    elif isinstance(value, list):
        items = value
    else:
        return None
    for item in items:
        found = _find_key(item, key)
        if found is not None:
            return found
    return None


def _cycle_so_far(messages: list[Any]) -> tuple[int, dict[str, Any], str, list[tuple[str, Any]]] | None:
    """Return (cycle, memories, framing text, [(tool, shown result)]) when the conversation is a being's cycle."""
    start = next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if isinstance(messages[i], dict) and messages[i].get("role") == "user"
        ),
        None,
    )
    if start is None:
        return None
    framing = _text_of(messages[start].get("content"))
    match = _FRAMING.match(framing)
    if match is None:
        return None
    names: dict[str, str] = {}
    done: list[tuple[str, Any]] = []
    for message in messages[start + 1 :]:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:
            names[call.get("id", "")] = call.get("function", {}).get("name", "?")
        if message.get("role") == "tool":
            try:
                shown = json.loads(_text_of(message.get("content")))
            except ValueError:
                shown = None
            done.append((names.get(message.get("tool_call_id", ""), "?"), shown))
    return int(match["cycle"]), _memories(messages), framing, done


def _remember(key: str, value: str) -> Reply:
    return Reply(tool_calls=[("self__remember", {"key": key, "value": value})])


def _being_reply(messages: list[Any], tools: dict[str, dict[str, Any]]) -> Reply | None:
    """Return the demo being's move in a cycle, or None when the conversation is not a being's cycle.

    It plays a being minding a small shop: the first round checks sales with
    the finance tool (``finance__check_sales`` when offered); after a sale it
    remembers it (``last_sale``); on its first cycles it remembers its plan;
    then it ends the cycle with a line saying what it found. It never
    switches model or rewrites its prompt.
    """
    state = _cycle_so_far(messages)
    if state is None:
        return None
    cycle, memories, framing, done = state
    finance = sorted(name for name in tools if name.startswith("finance__"))
    check = "finance__check_sales" if "finance__check_sales" in tools else (finance[0] if finance else None)
    can_remember = "self__remember" in tools
    remembered = any(name == "self__remember" for name, _ in done)
    if not done:
        if check:
            return Reply(tool_calls=[(check, example_for_schema(tools[check]))])
        if can_remember and memories.get("plan") != PLAN_WITHOUT_FINANCE:
            return _remember("plan", PLAN_WITHOUT_FINANCE)
        return Reply(content=f"Cycle {cycle}: no finance tools are configured, so there is nothing to earn. Waiting.")
    checked = next(((name, shown) for name, shown in done if name.startswith(_MONEY_PREFIXES)), None)
    if checked is None:
        return Reply(content=f"Cycle {cycle}: noted my plan. Ending this cycle.")
    name, shown = checked
    if not isinstance(shown, dict) or shown.get("status") != "success":
        error = shown.get("error", "no answer") if isinstance(shown, dict) else "no answer"
        return Reply(content=f"Cycle {cycle}: {name} failed ({error}); I will check again next cycle.")
    revenue = _find_key(shown.get("result"), "revenue_usd")
    orders = _find_key(shown.get("result"), "orders") or 0
    item = _find_key(shown.get("result"), "item") or "items"
    sale = _sale_amount(revenue)
    if sale is not None and can_remember and not remembered:
        earned = _EARNED.search(framing)
        total = (Decimal(earned["earned"]) if earned else Decimal(0)) + sale
        note = f"cycle {cycle}: {orders} × {item} for ${money_str(sale)} (earned ${money_str(total)} in all)"
        return _remember("last_sale", note)
    if can_remember and not remembered and memories.get("plan") != PLAN:
        return _remember("plan", PLAN)
    if sale is not None:
        return Reply(content=f"Cycle {cycle}: sold {orders} × {item} for ${money_str(sale)}. Ending this cycle.")
    return Reply(content=f"Cycle {cycle}: no sales since the last check. Ending this cycle.")


def _sale_amount(value: Any) -> Decimal | None:
    """Return a strictly positive revenue as a Decimal (from a decimal string or a JSON number), else None."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
    except ArithmeticError:
        return None
    return amount if amount.is_finite() and amount > 0 else None


def demo_policy(request_json: dict[str, Any], headers: dict[str, str]) -> Reply:
    """Return the demo model's deterministic reply.

    A json_schema response format gets a minimal valid JSON object; the
    judge's (``run_evaluation``) gets the demo judge's reading of the run
    (``singularity.demo_judge``). When a
    system message holds a ``## Rules`` section (see ``parse_rules``) and the
    request offers no tools or ends with the user's message, it answers
    exactly the label the rules give the last user message (``classify``).
    A being's cycle (the framing message "Begin autonomous cycle N.") gets
    the demo being's moves (``_being_reply``). Otherwise, when the user spoke
    last and tools are offered, it calls one tool chosen by a stable hash of
    that message, never one that rewrites the mind or touches money; after
    tool results it ends with a short summary.
    """
    messages = request_json.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    response_format = request_json.get("response_format") or {}
    from singularity.demo_proposer import is_proposer_request, proposer_reply

    if is_proposer_request(request_json):
        return proposer_reply(request_json)  # the loop's proposer agent: it investigates, then proposes
    if response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {"type": "object"}
        if is_judge_request(response_format):
            return Reply(content=json.dumps(judge_answer(_text_of(last.get("content")), schema)))
        return Reply(content=json.dumps(example_for_schema(schema)))
    if response_format.get("type") == "json_object":
        return Reply(content="{}")

    tools = _offered_tools(request_json)
    labelled = _classifier_reply(messages, tools)
    if labelled is not None:
        return labelled
    being = _being_reply(messages, tools)
    if being is not None:
        return being
    safe = {n: p for n, p in tools.items() if n not in _NOT_AT_RANDOM and not n.startswith(_MONEY_PREFIXES)}
    if last.get("role") == "user" and safe:
        tools = safe
        digest = int(hashlib.sha256(_text_of(last.get("content")).encode()).hexdigest()[:16], 16)
        names = sorted(tools)
        # Every other cycle, when it can, the demo remembers something so the mind visibly changes.
        others = [name for name in names if name != "self__remember"] or names
        name = (
            "self__remember" if "self__remember" in tools and digest % 2 == 0 else others[(digest // 2) % len(others)]
        )
        return Reply(tool_calls=[(name, example_for_schema(tools[name], seed=digest % 1000))])
    if last.get("role") == "tool":
        used = [
            call.get("function", {}).get("name", "?")
            for message in messages
            if isinstance(message, dict) and message.get("role") == "assistant"
            for call in message.get("tool_calls") or []
        ]
        recent = used[-1] if used else "a tool"
        return Reply(content=f"Demo model: used {recent} and noted the result. Ending this cycle.")
    return Reply(content="Demo model: nothing to do this cycle.")
