"""pynox: run untrusted, model-written Python under a kernel-enforced sandbox.

The single-run command line lives in :mod:`pynox.cli`, the confinement every
child applies to itself in :mod:`pynox.child`, and the pool in
:mod:`pynox.supervisor` and :mod:`pynox.template`, joined by :mod:`pynox.wire`.
"""

__version__ = "0.1.0"
