#!/usr/bin/env python3
"""The dependency rule of the modules, checked on the sources and on the CMake targets.

Every module may include (and its targets may link) only the modules on its line of ALLOWED, and
never the libraries on its line of FORBIDDEN_SYSTEM; domain/ also calls no clock, environment or
random device. Run by ctest (label unit) as `layering_test.py <source dir>`; prints every breach
and exits 1 when there is one.
"""
import pathlib
import re
import sys

# module -> the project modules its sources may include (itself always)
ALLOWED = {
    "log": set(),
    "metrics": set(),
    "domain": set(),
    # conf parses the simulator's knobs with their pure model (simulator/knobs.hpp only)
    "conf": {"domain", "simulator/knobs.hpp"},
    "persistence": {"domain", "log"},
    "client": {"domain"},
    "http": {"domain", "conf", "log", "metrics"},
    "simulator": {"domain", "conf", "http", "log", "metrics"},
    "actors": {"domain", "conf", "persistence", "client", "log", "metrics"},
    "app": {"domain", "conf", "persistence", "client", "http", "simulator", "actors", "log",
            "metrics"},
}
IO_LIBRARIES = {"pqxx": "libpqxx", "httplib.h": "cpp-httplib", "caf": "CAF", "curl": "libcurl"}
FORBIDDEN_SYSTEM = {
    "domain": {"pqxx", "httplib.h", "caf", "curl", "thread", "mutex", "condition_variable", "future",
               "random", "fstream", "filesystem"},
    "conf": {"curl", "pqxx", "httplib.h", "caf"},
    "persistence": {"curl", "httplib.h", "caf"},
    "client": {"pqxx", "caf"},
    "http": {"curl", "pqxx", "caf"},
    "simulator": {"curl", "pqxx", "caf"},
    "log": {"pqxx", "httplib.h", "caf", "curl"},
    "metrics": {"pqxx", "httplib.h", "caf", "curl"},
    "actors": {"httplib.h", "curl"},  # calls go through client/
}
DOMAIN_IMPURE_CALLS = re.compile(r"::now\(|getenv|random_device|std::rand\(|time\(nullptr\)")
TARGET_MODULE = {
    "outboxd_domain": "domain", "outboxd_conf": "conf", "outboxd_conf_values": "conf",
    "outboxd_persistence": "persistence", "outboxd_client": "client", "outboxd_http": "http",
    "outboxd_simulator": "simulator", "outboxd_simulator_model": "simulator",
    "outboxd_simulator_knobs": "simulator/knobs.hpp", "outboxd_actors": "actors",
    "outboxd_log": "log", "outboxd_metrics": "metrics",
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def module_of_include(path):
    first = path.split("/")[0]
    if first in ALLOWED:
        return path if path == "simulator/knobs.hpp" else first
    return None


def check_sources(root, breaches):
    for module in ALLOWED:
        for f in sorted((root / module).rglob("*")):
            if f.suffix not in (".cpp", ".hpp"):
                continue
            text = f.read_text(encoding="utf-8")
            rel = f.relative_to(root)
            for inc in INCLUDE.findall(text):
                target = module_of_include(inc)
                if target and target != module and target.split("/")[0] != module:
                    if target not in ALLOWED[module] and target.split("/")[0] not in ALLOWED[module]:
                        breaches.append(f"{rel}: includes {inc}, but {module}/ may not depend on "
                                        f"{target.split('/')[0]}/")
                first = inc.split("/")[0]
                if first in FORBIDDEN_SYSTEM.get(module, set()):
                    what = IO_LIBRARIES.get(first, f"<{first}>")
                    breaches.append(f"{rel}: includes <{inc}>, but {module}/ may not use {what}")
            if module == "domain":
                for n, line in enumerate(text.splitlines(), 1):
                    if DOMAIN_IMPURE_CALLS.search(line.split("//")[0]):
                        breaches.append(f"{rel}:{n}: domain/ reads a clock, the environment or a "
                                        f"random device: {line.strip()}")


def check_targets(root, breaches):
    link = re.compile(r"target_link_libraries\(\s*(\w+)(.*?)\)", re.S)
    for module in ALLOWED:
        cmake = root / module / "CMakeLists.txt"
        if not cmake.exists():
            continue
        for target, deps in link.findall(cmake.read_text(encoding="utf-8")):
            for dep in deps.split():
                dep_module = TARGET_MODULE.get(dep)
                if dep_module is None or dep_module.split("/")[0] == module:
                    continue
                if dep_module not in ALLOWED[module] and dep_module.split("/")[0] not in ALLOWED[module]:
                    breaches.append(f"{module}/CMakeLists.txt: {target} links {dep}, but {module}/ "
                                    f"may not depend on {dep_module.split('/')[0]}/")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    breaches = []
    check_sources(root, breaches)
    check_targets(root, breaches)
    for b in breaches:
        print(b)
    modules = len(ALLOWED)
    print(f"layering: {modules} modules checked, {len(breaches)} breach(es)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
