"""mock_servers."""
