"""``sessionstate demo``: the protocol told as a story (``story``), on a database of its own
(``database``), in one process or across two (``processes``)."""
