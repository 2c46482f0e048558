"""Unexpected failures, logged once per cause: the first with its traceback, each later one as a
line that names its error id and counts the cause.

A cause is the exception's type and the line that raised it. One bad request sent in a loop
wrote a 10.7 KB traceback per request (2.75 MB for 256 requests); now it costs one line each,
and the error id its client was given is still in the log.
"""

import logging
import threading

_seen: dict[tuple[str, str, int], int] = {}
_lock = threading.Lock()


def cause(err: BaseException) -> tuple[str, str, int]:
    """The exception's type, and the file and line that raised it (its innermost frame)."""
    frame = err.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = (frame.tb_frame.f_code.co_filename, frame.tb_lineno) if frame is not None else ("?", 0)
    return (type(err).__qualname__, *where)


def log_failure(logger: logging.Logger, err: BaseException, message: str, *args: object) -> None:
    """`message % args` at ERROR: with `err`'s traceback the first time its cause is seen, else
    one line naming the cause and how often it was seen."""
    kind, path, line = cause(err)
    with _lock:
        seen = _seen[(kind, path, line)] = _seen.get((kind, path, line), 0) + 1
    if seen == 1:
        logger.error(message, *args, exc_info=err)
        return
    logger.error(
        message + ": %s at %s:%d, seen %d times (its traceback was logged the first time)",
        *args,
        kind,
        path,
        line,
        seen,
    )
