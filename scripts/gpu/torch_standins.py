"""A pytest plugin (-p torch_standins) for running PyTorch's test files
against an installed torch of another version: before collection, each
test file's imports that this torch lacks become inert stand-ins, and
expecttest, which the wheel needs but does not bring, a minimal one. A
test that uses a stand-in fails natively too, and so is never counted
against a mode. What was stood in for is printed on stderr."""
import importlib
import re
import sys
import types
import unittest


class _Missing:
    """Falsy, callable as a decorator or a factory of one, any attribute."""

    def __bool__(self):
        return False

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return self

    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return self

    def __iter__(self):
        return iter(())


def _expecttest():
    try:
        import expecttest  # noqa: F401
        return
    except ImportError:
        pass

    class TestCase(unittest.TestCase):
        def assertExpectedInline(self, actual, expect, skip=0):
            self.assertEqual(str(actual).strip(), str(expect).strip())

        def assertExpectedRaisesInline(self, exc_type, fn, expect, *args, **kwargs):
            with self.assertRaises(exc_type) as cm:
                fn(*args, **kwargs)
            self.assertExpectedInline(str(cm.exception), expect)

    m = types.ModuleType("expecttest")
    m.TestCase = TestCase
    sys.modules["expecttest"] = m
    print("torch_standins: expecttest stood in for", file=sys.stderr)


def _import(name):
    for _ in range(100):
        try:
            importlib.import_module(name)
            return
        except ImportError as e:
            sys.modules.pop(name, None)
            m = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(e))
            if not m:
                raise
            setattr(importlib.import_module(m.group(2)), m.group(1), _Missing())
            print(f"torch_standins: {m.group(2)}.{m.group(1)} stood in for", file=sys.stderr)


def pytest_configure(config):
    _expecttest()
    sys.path.insert(0, str(config.rootpath))
    for arg in config.args:
        f = arg.split("::")[0]
        if f.endswith(".py"):
            _import(f.rsplit("/", 1)[-1][:-3])
