"""`keyword_dataclass`: `@dataclass(kw_only=True)`, written here on 3.9 (openEuler 22.03), so a field
added mid-class never shifts a positional argument into the wrong field."""
from __future__ import annotations

import sys
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: object):
        return lambda decorator: decorator

T = TypeVar("T")


@dataclass_transform(kw_only_default=True, field_specifiers=(field, Field))
def keyword_dataclass(cls: type[T]) -> type[T]:
    """A dataclass whose __init__ takes keywords only; a field without a default stays required."""
    if sys.version_info >= (3, 10):
        return dataclass(kw_only=True)(cls)
    cls = dataclass(init=False)(cls)   # 3.9 refuses a required field after a defaulted one only in the __init__ it writes
    params = [f for f in fields(cls) if f.init]

    def __init__(self: Any, **values: Any) -> None:
        unknown = sorted(set(values) - {f.name for f in params})
        if unknown:
            raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}")
        for f in params:
            if f.name not in values and f.default is MISSING and f.default_factory is MISSING:
                raise TypeError(f"{cls.__name__}.__init__() missing 1 required keyword-only argument: {f.name!r}")
            value = values[f.name] if f.name in values else f.default if f.default is not MISSING else f.default_factory()
            object.__setattr__(self, f.name, value)
        if hasattr(self, "__post_init__"):
            self.__post_init__()

    cls.__init__ = __init__
    return cls
