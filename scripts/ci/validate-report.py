#!/usr/bin/env python3
"""Validate usbperf reports (YAML or JSON) against their schema: docs/report.schema.json
(schema_version 2, the current one) or docs/report.v1.schema.json (schema_version 1, what
older builds wrote).

usage: scripts/ci/validate-report.py REPORT...   (exit 0 when every report is valid)
Needs python3 with pyyaml and jsonschema (scripts/test.sh installs them).
"""
import json
import os
import re
import sys

import jsonschema
import yaml


class Loader(yaml.SafeLoader):
    """SafeLoader without the timestamp resolver: timestamps stay strings, as in JSON."""


Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag not in ("tag:yaml.org,2002:timestamp",
                                                   "tag:yaml.org,2002:int",
                                                   "tag:yaml.org,2002:float")]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# Numbers as YAML 1.2 (and the writer, libyaml through serde_norway) read them: YAML 1.1's
# base-60 integers would read a device number `8:0` as 480.
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(0|[1-9][0-9]*)$"), list("-+0123456789"))
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def main(paths):
    here = os.path.dirname(os.path.abspath(__file__))
    validators = {}
    for version, name in ((1, "report.v1.schema.json"), (2, "report.schema.json")):
        with open(os.path.join(here, "..", "..", "docs", name)) as f:
            schema = json.load(f)
            validators[version] = jsonschema.validators.validator_for(schema)(schema)
    bad = 0
    for p in paths:
        with open(p) as f:
            text = f.read()
        doc = json.loads(text) if p.endswith(".json") else yaml.load(text, Loader=Loader)
        # A version this script does not know is judged by the current schema, whose
        # schema_version constant then names the mismatch.
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        validator = validators.get(version, validators[2])
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errors:
            where = "/".join(str(x) for x in e.absolute_path) or "(top)"
            print(f"{p}: {where}: {e.message}", file=sys.stderr)
        bad += bool(errors)
        if not errors:
            print(f"{p}: valid")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
