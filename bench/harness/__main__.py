"""`python3 -m harness` (bench/run): the runner."""
from harness.runner import main

main()
