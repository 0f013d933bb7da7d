#!/bin/sh
# Regenerates docs/report.schema.json and docs/power-cut.schema.json from the report's types
# (src/report/json_schema.rs): the drift test, told to write what the types give. Without
# USBPERF_WRITE_SCHEMA the same test fails when the files and the types differ.
set -eu
cd "$(dirname "$0")/../.."
USBPERF_WRITE_SCHEMA=1 exec cargo test --quiet --locked --features schema --test report_schema \
    -- the_schemas_in_docs_are_the_ones_the_types_give
