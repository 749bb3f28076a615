"""Object refs: values a process keeps and serves to the holders of their refs (``runtime.put``)."""
