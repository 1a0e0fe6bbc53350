"""The layers creb-rs's functions are grouped into by name, shared by scripts/bench-instructions
(instructions per GET under callgrind) and scripts/bench-layers (CPU time per GET under perf):
the first pattern a function's name matches gives its layer.

    python3 scripts/lib/layers.py      # its own checks: prints "layers: ok"
"""

import re

LAYERS = [
    ("sha256 (software under valgrind)", r"sha2::|compress256"),
    ("trace reading and planning", r"trace::|serde_json|humantime|plan::|memchr"),
    ("metrics and results", r"metrics::|hdrhistogram|flate2|miniz|results::"),
    ("client and connection", r"net::|client::|auth::|httparse|http::|bytes::|hyper"),
    ("dispatch and tasks", r"exec::|replay::|commands::|route::"),
    ("tokio", r"tokio"),
    ("allocator", r"rjem|jemalloc|tcache|arena|extent"),
    ("libc copies and compares", r"memcpy|memset|memcmp|memmove|strncmp|^0x"),
]


def layer_of(name):
    """A function's layer, from its name as callgrind_annotate lists it (`file:function`)
    or as perf names it (the function alone); musl's copies are written in assembly and
    have no name in a stripped build, only an address."""
    fn = name.split(":", 1)[1] if re.match(r"[^:]+:[^:]", name) else name
    for layer, pattern in LAYERS:
        if re.search(pattern, fn) or (layer.startswith("libc") and re.search(pattern, name)):
            return layer
    return "other"


if __name__ == "__main__":
    cases = {
        "???:creb::exec::task::run_task::{{closure}} [/tmp/creb-rs]": "dispatch and tasks",
        "???:creb::trace::spool::get [/tmp/creb-rs]": "trace reading and planning",
        "???:tokio::runtime::task::raw::poll": "tokio",
        "???:0x0000000000cd4791 [/tmp/creb-rs]": "libc copies and compares",
        "memcpy": "libc copies and compares",
        "_rjem_malloc": "allocator",
        "creb::net::plain_pool::PlainPool::send::{{closure}}": "client and connection",
        "sha2::sha256::x86::digest_blocks": "sha256 (software under valgrind)",
        "pow": "other",
    }
    for name, want in cases.items():
        got = layer_of(name)
        assert got == want, f"{name}: {got}, not {want}"
    print("layers: ok")
