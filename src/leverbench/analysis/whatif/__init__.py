"""What if: a trace served on each arm's measured rates (``forecast``): the plan of its calls (``plan``), the
prefix cache of finite capacity (``prefix_cache``, ``cache``), the order calls are served in (``orders``), the
slots (``slots``), the arms' serving facts (``arms``) and the cross-check against a real run (``verify``).  May
import :mod:`..base`, :mod:`..rates` and :mod:`..load`."""
