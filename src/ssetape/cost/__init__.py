"""What an exchange cost: its usage priced with genai-prices at the rates of its day."""
