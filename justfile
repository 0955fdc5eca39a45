# Recipes; ./dev RECIPE sets up .venv and the executors first, then runs one of these.
set positional-arguments

# `just` alone lists the recipes (as `./dev` alone prints its commands); it runs nothing.
default:
    @just --list

# plan and launch a real llama-server on a generated tiny model, ask it a question, stop it
demo *args:
    @exedra-engine demo "$@"

# everything CI checks: flag tables, lint, types, unit + property + integration tests
test *args: lint typecheck
    @scripts/test-phases.sh "" "$@"

# the quick loop while editing: no lint, no types, no test marked slow (CI's `just test` runs them)
test-quick *args:
    @scripts/test-phases.sh "not slow" "$@"

# the hypothesis suites with a much larger example budget
soak *args:
    HYPOTHESIS_PROFILE=soak python -m pytest -q properties "$@"

# benchmarks against their references, side by side; --json writes .cache/bench/<commit>.json
bench *args:
    python bench/run.py "$@"

lint:
    ruff check src tests properties bench scripts
    ruff format --check src tests properties bench scripts
    python scripts/gen_flag_tables.py --check-if-reference

typecheck:
    mypy

# the documentation site, strict: a broken reference fails
docs:
    NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir .cache/site

# sdist and wheel, installed into a fresh venv and smoke-tested
build:
    scripts/smoke-package.sh
