"""Share groups (KIP-932) into Delta: the parts of the ``kafka-share`` source built so far.

Experimental and not registered as a data source yet (docs/share-groups.md, issue 46).
"""
