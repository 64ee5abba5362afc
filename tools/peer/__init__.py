"""Run a framework's own test suite against our adapter: ``python -m sessionledger.tools.peer``.

``python -m sessionledger.tools.peer agents`` gets the OpenAI Agents SDK 0.24.0's tests from
its sdist (``pip download --no-binary :all: --no-deps openai-agents==0.24.0``);
``python -m sessionledger.tools.peer nanobot --source <checkout>`` takes nanobot's tests from a
checkout of its repository at tag v0.2.2 (the command does not fetch repositories). Each suite
runs twice, on the framework's own session classes and with our pytest plugin swapping them
for the adapters (:mod:`._agents_plugin`, :mod:`._nanobot_plugin`), and the command prints the
tests that fail only with ours. The tests are copied to a scratch directory, never into this
repository. A command, not part of CI: it needs the framework's test dependencies installed
in the interpreter it runs (``--python``).
"""

__all__: tuple[str, ...] = ()
