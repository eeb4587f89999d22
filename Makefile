# mtonnx: `make report` runs every notebook on the default params; `make test` runs the tests.
# With no virtualenv or conda env active, everything installs into .venv (made with the python3 on PATH).

ifneq ($(strip $(VIRTUAL_ENV)$(CONDA_PREFIX)),)
  PYTHON := python
  ENV_DIR := $(or $(VIRTUAL_ENV),$(CONDA_PREFIX))
else
  PYTHON := .venv/bin/python
  ENV_DIR := .venv
endif
STAMP := $(ENV_DIR)/.mtonnx-installed
PARAMS ?= params/default.yaml
VENV := [ -x "$(PYTHON)" ] || [ "$(ENV_DIR)" != ".venv" ] || python3 -m venv .venv

.PHONY: install js report test lint lab model wheel docs docs-refresh scale-refresh clean distclean

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(VENV)
	$(PYTHON) -m pip install --disable-pip-version-check -q -e ".[lab,bench,serve,scale,dev]"
	$(PYTHON) -m ipykernel install --sys-prefix --name mtonnx --display-name "Python (mtonnx)"
	@touch $@

# The JavaScript runtime's pinned packages (js/package-lock.json), with npm ci. onnxruntime-node's install script
# would fetch CUDA binaries where nvcc exists, which fails offline: skipped. Without npm the Node checks skip.
JS_STAMP := js/node_modules/.package-lock.json

js: $(JS_STAMP)

$(JS_STAMP): js/package.json js/package-lock.json
	@if command -v npm >/dev/null; then \
	  cd js && ONNXRUNTIME_NODE_INSTALL_CUDA=skip npm ci --no-audit --no-fund --loglevel=error; \
	else echo "npm is not installed: the JavaScript checks will skip"; fi

report: $(STAMP) js
	$(PYTHON) -m mtonnx run --params $(PARAMS)

# On every core: each test module (or class) stays on one worker, so its module fixtures are built once; the
# end-to-end modules are handed out first, in the order tests/conftest.py sorts them (not by test count).
test: $(STAMP) js
	$(PYTHON) -m pytest -q -n auto --dist loadscope --no-loadscope-reorder

lint: $(STAMP)
	$(PYTHON) -m ruff check src tests notebooks docs/hooks.py
	$(PYTHON) -m ruff format --check src tests notebooks docs/hooks.py
	$(ENV_DIR)/bin/lint-imports  # the layers, no cycles, a torch-free runtime: [tool.importlinter] in pyproject.toml

model: $(STAMP)
	$(PYTHON) -m mtonnx train --params params/train.yaml

lab: $(STAMP)
	$(PYTHON) -m jupyter lab notebooks/

# The wheel to deploy, dist/mtonnx-<version>-py3-none-any.whl (mtonnx is not on PyPI): the runtime alone, extras
# as `pip install "$(ls dist/mtonnx-*.whl)[serve]"`. Needs only pip, not the lab.
wheel:
	@$(VENV)
	$(PYTHON) -m pip wheel --no-deps -q -w dist .

# The documentation site, offline and strict (a broken link or a page missing from the navigation fails it): site/.
docs: $(STAMP)
	$(PYTHON) -m mkdocs build --strict

# The site's reference run: the default params run, then published into docs/reference/ (notebooks, figures, metrics);
# then the README's Deploy quickstart, `mtonnx migrate` on the default model from scratch, published into
# docs/reference-quickstart/ and written into README.md.
docs-refresh: $(STAMP) js
	$(PYTHON) -m mtonnx run --params params/default.yaml
	$(PYTHON) -m mtonnx.lab.docs refresh outputs/default docs/reference
	rm -rf outputs/quickstart
	$(PYTHON) -m mtonnx migrate --model models/hsk-enzh --out outputs/quickstart
	$(PYTHON) -m mtonnx.lab.quickstart outputs/quickstart docs README.md

# The whole lab at the real model's scale (params/opus-shape.yaml), each notebook's time published into docs/ and
# written into README.md.
scale-refresh: $(STAMP) js
	$(PYTHON) -m mtonnx run --params params/opus-shape.yaml
	$(PYTHON) -m mtonnx.lab.docs timings outputs/opus-shape docs README.md

clean:
	find outputs -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +

distclean: clean
	rm -rf .venv src/*.egg-info site
