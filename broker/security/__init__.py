"""Authentication and authorization of client connections (listeners, TLS, SASL, ACLs)."""
