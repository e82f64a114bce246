"""What a run says: typed results and the run summary, the HTML report, JUnit."""
