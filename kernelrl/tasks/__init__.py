"""Task suites: KernelBench-format tasks, the built-in suite and its seed corpus."""

from kernelrl.tasks.loader import Task, check_source, get_task, load_suite, load_task_file, source_hash
from kernelrl.tasks.seeds import Seed, all_seeds, load_seeds

__all__ = ["Task", "Seed", "all_seeds", "check_source", "get_task", "load_seeds", "load_suite", "load_task_file",
           "source_hash"]
