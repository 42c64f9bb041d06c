"""Offline analysis and its report: ``perfsift analyze`` (:mod:`.analyze`), the HTML report
(:mod:`.report`, :mod:`.figures`, :mod:`.plots`, :mod:`.findings`), ``perfsift explain``
(:mod:`.explain`), the selection's evaluation (:mod:`.evaluation`) and the cleaning quality
measure (:mod:`.quality`, DTW)."""
