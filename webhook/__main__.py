from webhook.cli.main import main

main()
