"""The official SDKs as clients of `worklane proxy`, for crates/proxy/tests/sdk.rs.

Usage: sdk_drive.py FLAVOR BASE_URL KEY SCENARIO [ARGS...]

FLAVOR is `anthropic` or `openai`; BASE_URL the proxy (`http://127.0.0.1:PORT`). Prints one
JSON object on stdout. Scenarios:

  calls          with max_retries=0: one call, one stream (text and usage of each)
  retry          with the SDK's default retries: one call (the test made the provider's next
                 answer a 429 with retry-after 1 s)
  refused        with max_retries=0: one call (the test made the provider's next answer a 429):
                 the SDK's own rate-limit error
  herd N EACH    N threads, each with its own client and max_retries=0, EACH calls one after
                 another: the statuses
"""

import json
import sys
import threading

import anthropic
import openai

flavor, base, key, scenario = sys.argv[1:5]
rest = sys.argv[5:]


def client(max_retries):
    if flavor == "anthropic":
        return anthropic.Anthropic(base_url=base, api_key=key, max_retries=max_retries)
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=max_retries)


def create(c):
    if flavor == "anthropic":
        m = c.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "Say hello."}],
        )
        return {"text": m.content[0].text, "output_tokens": m.usage.output_tokens}
    r = c.chat.completions.create(
        model="gpt-test",
        max_completion_tokens=64,
        messages=[{"role": "user", "content": "Say hello."}],
    )
    return {
        "text": r.choices[0].message.content,
        "output_tokens": r.usage.completion_tokens,
    }


def stream(c):
    if flavor == "anthropic":
        with c.messages.stream(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "Say hello."}],
        ) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        return {"text": text, "output_tokens": final.usage.output_tokens}
    chunks = c.chat.completions.create(
        model="gpt-test",
        max_completion_tokens=64,
        messages=[{"role": "user", "content": "Say hello."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    return {"text": text, "output_tokens": usage}


def status_of(e):
    return getattr(e, "status_code", None) or type(e).__name__


if scenario == "calls":
    c = client(0)
    print(json.dumps({"create": create(c), "stream": stream(c)}))
elif scenario == "retry":
    print(json.dumps({"create": create(client(anthropic.DEFAULT_MAX_RETRIES))}))
elif scenario == "refused":
    try:
        create(client(0))
        print(json.dumps({"refused": None}))
    except (anthropic.RateLimitError, openai.RateLimitError) as e:
        print(json.dumps({"refused": e.status_code, "type": type(e).__name__}))
elif scenario == "herd":
    n, each = int(rest[0]), int(rest[1])
    statuses = []
    lock = threading.Lock()

    def one():
        c = client(0)
        for _ in range(each):
            try:
                create(c)
                s = 200
            except (anthropic.APIStatusError, openai.APIStatusError) as e:
                s = e.status_code
            except Exception as e:  # noqa: BLE001 - the test prints what it was
                s = status_of(e)
            with lock:
                statuses.append(s)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"statuses": statuses}))
else:
    sys.exit(f"unknown scenario {scenario}")
