"""Tiny stand-ins for steps/<stage>.py, launched by the real runners in flow tests.

They use the real step contract (``kernelrl.step.run_step``: arguments, store stage records, manifest) and
the real checkpoint store, but do no ML. Behaviour is steered per stage by ``<KERNELRL_HOME>/fake/<stage>.json``
(see ``_fake.py``); every invocation appends ``<stage>`` to ``<KERNELRL_HOME>/fake/calls.log``.
"""
