# Type stub for posemb._stream (src/bench/stream.c), the benchmarks' own
# extension: streaming passes that measure the machine's bandwidth limit.
from typing import Any

def stream(*args: Any) -> Any: ...
