"""One encrypted query over many workers: a family's circuit cut into stage functions of one
concrete-python module (one key set), run as a graph of partition and merge steps
(``crypto.knn.split.program``; the fast family's graph is ``crypto.knn.fast.split``)."""
