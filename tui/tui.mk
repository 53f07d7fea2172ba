# tui: huvm-top, the live view and policy editor (package huvm_top, console script huvm-top).
#
#   make tui-test   huvm-top's tests (tests/python/test_tui*.py: pilot-driven app over the fake source,
#                   sources over the real policy core and the simulator, bcc USDT when root) and a
#                   check of the installed console script
#   make top        run huvm-top on a simulated node under load (no GPU needed)
#   make tui-screenshots   regenerate docs/img/huvm-top-80x24.svg and -160x50.svg (headless, simulated node)
#
# Lint (ruff, mypy --strict) of tui/huvm_top is part of pyctl.mk's `lint`.

.PHONY: tui-test top tui-screenshots

TUI_PYTEST_ARGS ?=

tui-test: | venv
	@cd $(ROOT) && $(PY) -m pytest -q -p no:cacheprovider tests/python/test_tui*.py $(TUI_PYTEST_ARGS)
	@$(VENV)/bin/huvm-top --help >/dev/null
	@rc=0; $(VENV)/bin/huvm-top --backend kernel --device $(BUILD)/no-such-device --no-wait 2>/dev/null || rc=$$?; \
		[ $$rc -eq 1 ] || { echo "huvm-top: expected exit status 1 without a device, got $$rc"; exit 1; }

top: | venv
	@$(VENV)/bin/huvm-top --sim

test: tui-test

tui-screenshots: | venv
	@cd $(ROOT) && $(PY) tui/scripts/screenshots.py $(ROOT)/docs/img
