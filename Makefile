# Entry points; each is a script in scripts/ so CI and people run the same thing.
.PHONY: setup demo test release dist bench

setup:
	scripts/setup

demo:
	scripts/demo

test:
	scripts/test

release:
	rustup target add x86_64-unknown-linux-musl >/dev/null
	cargo build --release --locked --target x86_64-unknown-linux-musl

dist:
	scripts/dist

bench:
	cargo bench
