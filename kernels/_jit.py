"""`njit`: numba.njit for gpupipe's kernels, compiled once per kernel and argument types, never per constant.

numba compiles a kernel called from another kernel for the argument types at the call site, literal constants
included: `f(x, 0)`, or `nt = 0` passed on as `f(x, nt)`, compile f for Literal[int](0) besides int64, and each is a
full compile of f and of everything it calls (the quality kernel's tokenizer compiled three times, langid's token
lookup three times: a fifth of the warm-up's compiling). A kernel decorated here is typed for the plain types
(int64, bool, ...) at every call site instead. The kernels branch on such arguments at run time, where a literal
would have pruned the branch at compile time: the same results, and no measurable difference in speed.
"""

from __future__ import annotations

import numba
from numba.core import types

from gpupipe._numba_cache import install_locator

install_locator()  # before any kernel is decorated: the cache folder is chosen then


def njit(*args, **options):
    """numba.njit(cache=True, **options); a call from another kernel passes non-literal argument types."""
    options.setdefault("cache", True)

    def wrap(fn):
        dispatcher = numba.njit(**options)(fn)
        template = dispatcher.get_call_template  # what numba's typing of a call site asks the dispatcher

        def get_call_template(arg_types, kws):
            return template(tuple(types.unliteral(t) for t in arg_types),
                            {k: types.unliteral(t) for k, t in kws.items()})

        dispatcher.get_call_template = get_call_template
        return dispatcher

    return wrap(args[0]) if args and callable(args[0]) else wrap
