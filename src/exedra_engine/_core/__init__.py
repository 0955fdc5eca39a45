"""The pure core: functions of data. Nothing here reads, writes, times or spawns;
tests/architecture/test_import_contract.py holds it to that."""
