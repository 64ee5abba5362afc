"""Packaging: the four source folders install as subpackages of one top-level package.

The repository keeps ``eventlog/``, ``projections/``, ``replay/`` and ``tools/`` at its top;
installed, they are ``sessionledger.eventlog`` and so on, beside the facade in
``sessionledger/``. Every subpackage below them is found here, so none is left out of the wheel.
"""

from setuptools import find_packages, setup

PACKAGE = "sessionledger"
PARTS = ("eventlog", "projections", "replay", "tools")

packages = [PACKAGE]
package_dir = {PACKAGE: PACKAGE}
for part in PARTS:
    package_dir[f"{PACKAGE}.{part}"] = part
    packages += [f"{PACKAGE}.{name}" for name in find_packages(include=[part, f"{part}.*"])]

setup(packages=packages, package_dir=package_dir)
