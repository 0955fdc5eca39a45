from exedra_engine.cli import run

run()
